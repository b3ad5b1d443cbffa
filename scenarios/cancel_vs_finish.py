"""Scenario 9: a cancel racing the winning finish; exactly one takes effect, the job says which."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from scenarios.context import ScenarioContext, brief
from scenarios.runner import scenario
from scenarios.setup import SIM_OPENAI
from scenarios.stage import Stage, job_id_of, post_job, run_alone, stage

NAME = "cancel-vs-finish"
CALL_TIME = 1.0  # seconds the provider takes
#: When each round's cancel is sent, relative to the provider's expected answer (seconds).
OFFSETS = (-0.3, -0.1, -0.04, -0.02, 0.0, 0.02, 0.04, 0.1, 0.3)


async def one_round(
    ctx: ScenarioContext, s: Stage, index: int, offset: float
) -> tuple[str, str]:
    """Race one cancel against one finish; return the job id and which took effect."""
    created = await post_job(ctx, s.gateway, s.key, f"cvf-{index}",
                             ctx.job_body(s.contract, seed=index), actor=f"round{index}")
    ctx.expect(created.status_code == 201, f"round {index}: the job is created",
               f"status {created.status_code}: {created.text[:200]}")
    job_id = job_id_of(created) or ""
    received: float | None = None
    deadline = time.monotonic() + 10.0
    while received is None and time.monotonic() < deadline:
        for call in await ctx.sim_calls(s.sim):
            if job_id in str(call.get("idempotency_key")):
                received = float(call["received_at"])
        if received is None:
            await asyncio.sleep(0.02)
    ctx.expect(received is not None, f"round {index}: the provider call started")
    assert received is not None
    await asyncio.sleep(max(0.0, received + CALL_TIME + offset - time.time()))
    cancel = await ctx.request("POST", f"{s.gateway.base_url}/v1/jobs/{job_id}/cancel",
                               key=s.key, actor=f"round{index}")
    ctx.expect(cancel.status_code in (200, 202, 409),
               f"round {index}: cancel answers 200/202 or 409",
               f"status {cancel.status_code}: {cancel.text[:200]}")
    job = await ctx.wait_job(
        s.gateway, s.key, job_id,
        lambda j: j.get("status") in ("succeeded", "cancelled")
        and all(a.get("state") not in ("starting", "running") for a in j.get("attempts", [])),
        CALL_TIME + 10.0, f"round {index}: the race settles",
    )
    return job_id, _judge(ctx, index, offset, cancel.status_code, job)


def _judge(
    ctx: ScenarioContext, index: int, offset: float, status: int, job: dict[str, Any]
) -> str:
    attempt = job["attempts"][0]
    label = f"round {index} (cancel at {offset:+.2f} s)"
    ctx.expect(job.get("version") == 2, f"{label}: exactly one decision (version 1 -> 2)",
               f"version {job.get('version')}")
    if status == 409:
        ctx.expect(job.get("status") == "succeeded", f"{label}: cancel refused, so finish won",
                   brief(job))
        ctx.expect(job.get("completed_by") == attempt.get("id") and job.get("result") is not None,
                   f"{label}: the job names the winning attempt and keeps its result")
        return "finish"
    ctx.expect(job.get("status") == "cancelled", f"{label}: cancel accepted, so cancel won",
               brief(job))
    ctx.expect(job.get("completed_by") is None and job.get("result") is None,
               f"{label}: a cancelled job has no winner and no result",
               f"completed_by={job.get('completed_by')}")
    ctx.expect(attempt.get("state") in ("lost", "cancelled"),
               f"{label}: the attempt that finished late lost", brief(job))
    return "cancel"


@scenario(NAME, "Cancel races the winning finish: exactly one takes effect, the job says which")
async def cancel_vs_finish(ctx: ScenarioContext) -> None:
    """Send cancels just before, at, and just after the provider's answer."""
    s = await stage(ctx, runners=2 * len(OFFSETS))
    await ctx.script(s.sim, SIM_OPENAI, [{"kind": "delay", "seconds": CALL_TIME}],
                     count=len(OFFSETS))
    ctx.action(f"{len(OFFSETS)} races, cancel offsets {OFFSETS[0]:+} … {OFFSETS[-1]:+} s")
    rounds = await asyncio.gather(
        *(one_round(ctx, s, i, off) for i, off in enumerate(OFFSETS, start=1))
    )
    winners = [w for _, w in rounds]
    ctx.note("winners by round: " + ", ".join(
        f"{off:+.2f}s→{w}" for off, w in zip(OFFSETS, winners, strict=True)))
    ctx.expect(winners[0] == "cancel", "a cancel well before the answer wins",
               f"{OFFSETS[0]:+} s: {winners[0]}")
    ctx.expect(winners[-1] == "finish", "a cancel well after the answer loses",
               f"{OFFSETS[-1]:+} s: {winners[-1]}")
    calls = await ctx.sim_calls(s.sim)
    ctx.expect(len(calls) == len(OFFSETS), "one provider call per job", f"{len(calls)} calls")
    middle = len(rounds) // 2
    for index in (middle - 1, middle, middle + 1):
        await ctx.capture(s.gateway, s.key, rounds[index][0], s.sim,
                          label=f"round {index + 1} ({OFFSETS[index]:+.2f}s)")


if __name__ == "__main__":
    run_alone(NAME)
