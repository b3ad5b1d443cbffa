"""Scenario 9: a cancel racing the winning finish; exactly one takes effect, the job says which."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from scenarios.context import ScenarioContext, brief
from scenarios.model import MarkKind, TimelineMark
from scenarios.registry import scenario
from scenarios.setup import SIM_OPENAI
from scenarios.stage import Stage, job_id_of, post_job, stage

NAME = "cancel-vs-finish"
CALL_TIME = 1.0  # seconds the provider takes
#: When each racing cancel is sent, relative to the provider's expected answer (seconds).
RACE_OFFSETS = (-0.04, -0.02, 0.0, 0.02, 0.04)
EARLY = "early"  #: a round that cancels right after the call starts: the cancel must win
LATE = "late"  #: a round that cancels after the client saw success: the cancel must lose
POLL = 0.05  # seconds between reads of the simulator's call log


class CallWatcher:
    """One poller of the simulator's call log that tells each round when its call started."""

    def __init__(self, ctx: ScenarioContext, s: Stage) -> None:
        self._ctx, self._s = ctx, s
        self._received: dict[str, float] = {}
        self._changed = asyncio.Event()

    async def run(self) -> None:
        """Poll until cancelled."""
        while True:
            for call in await self._ctx.sim_calls(self._s.sim):
                key = str(call.get("idempotency_key") or "")
                job = key.split("/", 1)[0]
                if job and job not in self._received:
                    self._received[job] = float(call["received_at"])
                    self._changed.set()
            await asyncio.sleep(POLL)

    async def received(self, job_id: str, timeout: float) -> float | None:
        """Return when the provider received ``job_id``'s call (None on timeout)."""
        deadline = time.monotonic() + timeout
        while job_id not in self._received and time.monotonic() < deadline:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), deadline - time.monotonic())
            except TimeoutError:
                break
        return self._received.get(job_id)


async def one_round(
    ctx: ScenarioContext, s: Stage, watcher: CallWatcher, index: int, when: float | str
) -> tuple[str, str]:
    """Race one cancel against one finish; return the job id and which took effect."""
    label = f"round {index} ({when if isinstance(when, str) else f'{when:+.2f}s'})"
    created = await post_job(
        ctx,
        s.gateway,
        s.key,
        f"cvf-{index}",
        ctx.job_body(s.contract, seed=index),
        actor=f"round{index}",
    )
    ctx.expect(
        created.status_code == 201,
        f"{label}: the job is created",
        f"status {created.status_code}: {created.text[:200]}",
    )
    job_id = job_id_of(created) or ""
    watched = when in (EARLY, LATE, 0.0)
    if watched:
        ctx.watch(s.gateway, s.key, job_id, s.sim, label=label)
    received = await watcher.received(job_id, 10.0)
    ctx.expect(received is not None, f"{label}: the provider call started")
    assert received is not None
    if when == EARLY:
        await asyncio.sleep(max(0.0, received + 0.1 - time.time()))
    elif when == LATE:
        await ctx.wait_job(
            s.gateway,
            s.key,
            job_id,
            lambda j: j.get("status") == "succeeded",
            CALL_TIME + 10.0,
            f"{label}: the client sees the job succeed",
        )
    else:
        assert isinstance(when, float)
        await asyncio.sleep(max(0.0, received + CALL_TIME + when - time.time()))
    sent_at = ctx.now()
    cancel = await ctx.request(
        "POST", f"{s.gateway.base_url}/v1/jobs/{job_id}/cancel", key=s.key, actor=f"round{index}"
    )
    if watched:
        ctx.timeline.append(
            TimelineMark(
                sent_at, f"{label} client", MarkKind.ACTION, f"cancel → {cancel.status_code}"
            )
        )
    ctx.expect(
        cancel.status_code in (200, 202, 409),
        f"{label}: cancel answers 200/202 or 409",
        f"status {cancel.status_code}: {cancel.text[:200]}",
    )
    job = await ctx.wait_job(
        s.gateway,
        s.key,
        job_id,
        lambda j: (
            j.get("status") in ("succeeded", "cancelled")
            and all(a.get("state") not in ("starting", "running") for a in j["attempts"])
        ),
        CALL_TIME + 10.0,
        f"{label}: the race settles",
    )
    return job_id, _judge(ctx, label, cancel.status_code, job)


def _judge(ctx: ScenarioContext, label: str, status: int, job: dict[str, Any]) -> str:
    attempt = job["attempts"][0]
    ctx.expect(
        job.get("version") == 2,
        f"{label}: exactly one decision (version 1 -> 2)",
        f"version {job.get('version')}",
    )
    if status == 409:
        ctx.expect(
            job.get("status") == "succeeded", f"{label}: cancel refused, so finish won", brief(job)
        )
        ctx.expect(
            job.get("completed_by") == attempt.get("id") and job.get("result") is not None,
            f"{label}: the job names the winning attempt and keeps its result",
        )
        return "finish"
    ctx.expect(
        job.get("status") == "cancelled", f"{label}: cancel accepted, so cancel won", brief(job)
    )
    ctx.expect(
        job.get("completed_by") is None and job.get("result") is None,
        f"{label}: a cancelled job has no winner and no result",
        f"completed_by={job.get('completed_by')}",
    )
    ctx.expect(
        attempt.get("state") in ("lost", "cancelled"),
        f"{label}: the attempt that finished late lost",
        brief(job),
    )
    return "cancel"


@scenario(
    NAME, "Cancel races the winning finish: exactly one takes effect, the job says which", order=9
)
async def cancel_vs_finish(ctx: ScenarioContext) -> None:
    """Cancel right after the call starts, around its answer, and after the client saw success."""
    rounds_plan: list[float | str] = [EARLY, *RACE_OFFSETS, LATE]
    s = await stage(ctx, runners=2 * len(rounds_plan))
    await ctx.script(
        s.sim, SIM_OPENAI, [{"kind": "delay", "seconds": CALL_TIME}], count=len(rounds_plan)
    )
    ctx.action(f"{len(rounds_plan)} rounds: early, {len(RACE_OFFSETS)} close races, late")
    watcher = CallWatcher(ctx, s)
    polling = asyncio.create_task(watcher.run())
    try:
        rounds = await asyncio.gather(
            *(one_round(ctx, s, watcher, i, when) for i, when in enumerate(rounds_plan, start=1))
        )
    finally:
        polling.cancel()
    winners = [w for _, w in rounds]
    ctx.note(
        "winners: "
        + ", ".join(
            f"{w if isinstance(w, str) else f'{w:+.2f}s'}→{r}"
            for w, r in zip(rounds_plan, winners, strict=True)
        )
    )
    ctx.expect(winners[0] == "cancel", "a cancel while the call is in flight wins", winners[0])
    ctx.expect(
        winners[-1] == "finish", "a cancel after the client saw success is refused", winners[-1]
    )
    calls = await ctx.sim_calls(s.sim)
    ctx.expect(len(calls) == len(rounds_plan), "one provider call per job", f"{len(calls)} calls")
