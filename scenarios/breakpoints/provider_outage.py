"""Scenario 16: the primary is down (503 on every call) for a while and jobs keep coming
(issue 43). Its circuit opens, so it gets a bounded number of calls while it is down; the
jobs fail over to the certified fallback and succeed, each run once; once the outage is
over a probe closes the circuit and new jobs run on the primary again."""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections import Counter
from typing import Any

from providers.simulator.control_client import SimulatorControl
from scenarios.context import ScenarioContext, brief
from scenarios.fleet import (
    Posted,
    executions,
    iso_to_unix,
    post_many,
    providers,
    settle,
    winner,
)
from scenarios.model import MarkKind, TimelineMark
from scenarios.registry import scenario
from scenarios.setup import SIM_ANTHROPIC, SIM_OPENAI
from scenarios.stage import Stage, create_watched_job, stage

NAME = "provider-outage"
OUTAGE = 15.0  # seconds sim-openai answers 503 to every call
RATE = 5.0  # jobs per second the clients create, during the outage and after it
#: The most calls the primary may get while it is down: 25 over 20 s, scaled to OUTAGE.
MAX_CALLS_DOWN = math.ceil(25 * OUTAGE / 20)
RECOVERY = 15.0  # seconds after the outage within which the primary takes jobs again
BACK_ON_PRIMARY = 3  # jobs that must run on the primary after the outage before it stops
SETTLE_WITHIN = 30.0  # seconds the jobs get to settle once the clients stopped
LOOK = 0.2  # seconds between two looks at GET /v1/providers
CAPACITY = {"patience": 5.0, "breaker_failures": 5, "breaker_open": 5.0}


@scenario(
    NAME,
    "The primary is down 15 s under steady load: the circuit opens, jobs fail over, "
    "then the primary takes jobs again",
    order=16,
)
async def provider_outage(ctx: ScenarioContext) -> None:
    """503 on sim-openai for 15 s while 5 jobs a second arrive; sim-anthropic certified."""
    s = await stage(ctx, certified=True, capacity=CAPACITY)
    before = await create_watched_job(
        ctx, s, "outage-before", ctx.job_body(s.contract), wait=15, label="before"
    )
    job = await ctx.wait_job(
        s.gateway, s.key, before, lambda j: j.get("status") == "succeeded", 10.0, "a job first"
    )
    ctx.expect(
        winner(job).get("provider") == SIM_OPENAI,
        f"before the outage a job succeeds on {SIM_OPENAI}",
        brief(job),
    )

    circuit: list[tuple[float, str]] = []  # (unix time, circuit) at each change seen
    watcher = asyncio.create_task(watch_circuit(ctx, s, circuit))
    try:
        await outage_under_load(ctx, s, circuit)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)


async def watch_circuit(ctx: ScenarioContext, s: Stage, seen: list[tuple[float, str]]) -> None:
    """Note every change of sim-openai's circuit in ``GET /v1/providers``, until cancelled."""
    while True:
        try:
            state = str((await providers(ctx, s)).get(SIM_OPENAI, {}).get("circuit"))
        except Exception:  # a slow answer is a missed look, not a verdict
            state = ""
        if state and (not seen or seen[-1][1] != state):
            seen.append((time.time(), state))
        await asyncio.sleep(LOOK)


async def outage_under_load(
    ctx: ScenarioContext, s: Stage, circuit: list[tuple[float, str]]
) -> None:
    """Start the outage, create jobs at RATE until the primary is back, then check."""
    control = SimulatorControl(ctx.http, s.sim.base_url)
    ctx.action(f"{SIM_OPENAI} down for {OUTAGE:g} s (503 on every call)")
    down = time.time()
    await control.outage(SIM_OPENAI, OUTAGE)
    up = down + OUTAGE  # the simulator's own clock starts a little later: a margin for it

    ctx.action(f"clients create {RATE:g} jobs a second")
    pending: list[asyncio.Task[Posted]] = []
    seq = 0
    stop_by = up + RECOVERY
    back_at: float | None = None  # unix time of the primary's first 200 after the outage
    first = time.monotonic()
    while time.time() < stop_by:
        pending.append(asyncio.create_task(post_many(ctx, s, "outage", seq)))
        seq += 1
        if time.time() > up and seq % int(RATE) == 0:
            answered = await primary_answers_after(ctx, s, up)
            if answered:
                back_at = back_at or min(answered)
                if len(answered) >= BACK_ON_PRIMARY:
                    break
        # On time, not after a pause: a busy event loop must not thin the load out.
        await asyncio.sleep(max(0.0, first + seq / RATE - time.monotonic()))
    elapsed = time.monotonic() - first
    ctx.action(f"clients stop: {seq} jobs in {elapsed:.1f} s ({seq / elapsed:.1f}/s)")
    posted = list(await asyncio.gather(*pending))
    ctx.expect(
        len({p.job_id for p in posted}) == len(posted),
        f"{len(posted)} keys made {len(posted)} jobs, each answered 201",
        f"{len({p.job_id for p in posted})} job ids",
    )
    jobs = await settle(ctx, s, (p.job_id for p in posted), SETTLE_WITHIN)
    statuses = Counter(str(j.get("status")) for j in jobs.values())
    ctx.expect(
        statuses == Counter({"succeeded": len(jobs)}),
        f"every one of the {len(jobs)} jobs succeeds (0 failed)",
        str(dict(statuses)),
    )

    opened = [t for t, state in circuit if state == "open" and down <= t <= up + 1.0]
    ctx.expect(
        bool(opened),
        f"GET /v1/providers shows {SIM_OPENAI}'s circuit open during the outage",
        f"circuit changes seen: {changes(ctx, circuit)}",
    )
    primary = await ctx.sim_calls(s.sim, SIM_OPENAI)
    fallback = await ctx.sim_calls(s.sim, SIM_ANTHROPIC)
    turned_away = [c for c in primary if c.get("behaviour") == "outage"]
    while_down = [c for c in primary if down <= float(c["received_at"]) <= up]
    ctx.expect(
        len(while_down) <= MAX_CALLS_DOWN,
        f"{SIM_OPENAI} got at most {MAX_CALLS_DOWN} calls in its {OUTAGE:g} s outage",
        f"{len(while_down)} calls, {len(turned_away)} answered with the outage's 503",
    )
    ctx.expect(
        back_at is not None and back_at - up <= RECOVERY,
        f"within {RECOVERY:g} s of the outage's end {SIM_OPENAI} runs a job again",
        "no 200 from it after the outage" if back_at is None else f"{back_at - up:.1f} s",
    )
    closed = [t for t, state in circuit if state == "closed" and t > up]
    ctx.expect(
        bool(closed) and closed[0] - up <= RECOVERY,
        f"GET /v1/providers shows its circuit closed again within {RECOVERY:g} s",
        f"circuit changes seen: {changes(ctx, circuit)}",
    )
    after = [j for j in jobs.values() if created(j) > closed[0]]
    ctx.expect(
        bool(after) and all(winner(j).get("provider") == SIM_OPENAI for j in after),
        f"every job created after the circuit closed succeeded on {SIM_OPENAI}",
        f"{len(after)} jobs, winners {dict(Counter(winner(j).get('provider') for j in after))}",
    )

    _, runs = executions([*primary, *fallback])
    ctx.expect(
        all(runs[j] == 1 for j in jobs),
        "each job ran exactly once at a provider (one 200 over both)",
        f"runs per job: {dict(Counter(runs[j] for j in jobs))}",
    )
    assert back_at is not None  # the check above stops the scenario otherwise
    report(ctx, s, jobs, circuit, (down, up), while_down, back_at, fallback)


def created(job: dict[str, Any]) -> float:
    """Return the job's creation as a unix time."""
    return iso_to_unix(job.get("created_at")) or 0.0


def changes(ctx: ScenarioContext, circuit: list[tuple[float, str]]) -> str:
    """Say the circuit's changes in scenario seconds."""
    return ", ".join(f"{state} at {ctx.rel(t):.1f} s" for t, state in circuit) or "none"


async def primary_answers_after(ctx: ScenarioContext, s: Stage, since: float) -> list[float]:
    """Return when sim-openai answered 200 after ``since`` (unix times)."""
    calls = await ctx.sim_calls(s.sim, SIM_OPENAI)
    return [
        float(c["received_at"])
        for c in calls
        if c.get("status") == 200 and float(c["received_at"]) > since
    ]


def report(
    ctx: ScenarioContext,
    s: Stage,
    jobs: dict[str, dict[str, Any]],
    circuit: list[tuple[float, str]],
    window: tuple[float, float],
    while_down: list[dict[str, Any]],
    back_at: float,
    fallback: list[dict[str, Any]],
) -> None:
    """Note the figures and put a few telling jobs on the timeline."""
    down, up = window
    during = sorted(
        (j for j in jobs.values() if down <= created(j) <= up), key=lambda j: created(j)
    )
    winners = Counter(str(winner(j).get("provider")) for j in jobs.values())
    took = [(iso_to_unix(winner(j).get("finished_at")) or created(j)) - created(j) for j in during]
    opened = [t for t, state in circuit if state == "open"]
    probes = [c for c in while_down if opened and float(c["received_at"]) > opened[0]]
    ctx.note(
        f"{len(jobs)} jobs (asked for {RATE:g}/s), {len(during)} created during the {OUTAGE:g} s "
        f"outage; winners {dict(winners)}; {SIM_OPENAI} got {len(while_down)} calls while "
        f"down (limit {MAX_CALLS_DOWN}), {len(probes)} of them after its circuit was seen "
        f"open (probes); the circuit: {changes(ctx, circuit)}; first 200 from it "
        f"{back_at - up:.1f} s after the outage; {len(fallback)} calls to {SIM_ANTHROPIC}; "
        + (
            f"jobs created during the outage took {statistics.median(took):.1f} s median, "
            f"{max(took):.1f} s at most, to succeed"
            if took
            else "no job created during the outage"
        )
    )
    for t, state in circuit:
        ctx.timeline.append(
            TimelineMark(ctx.rel(t), f"circuit · {SIM_OPENAI}", MarkKind.EVENT, state)
        )
    ctx.timeline.append(
        TimelineMark(ctx.rel(up), "scenario", MarkKind.ACTION, f"{SIM_OPENAI}'s outage ends")
    )
    lane = f"{SIM_OPENAI} · every call while down"
    for call in while_down:
        ctx.timeline.append(
            TimelineMark(
                ctx.rel(float(call["received_at"])),
                lane,
                MarkKind.CALL_RECEIVED,
                str(call.get("idempotency_key")),
            )
        )
        if call.get("finished_at") is not None:
            ended = ctx.rel(float(call["finished_at"]))
            ctx.timeline.append(
                TimelineMark(ended, lane, MarkKind.CALL_ENDED, f"{call.get('status')}")
            )
    labels = {
        "failed over": next((j for j in during if len(j["attempts"]) > 1), None),
        "circuit open": next((j for j in during if opened and created(j) > opened[0] + 0.5), None),
        "after": next(
            (j for j in sorted(jobs.values(), key=created) if created(j) > back_at), None
        ),
    }
    for label, job in labels.items():
        if job is not None:
            ctx.watch(s.gateway, s.key, str(job["id"]), s.sim, label)
