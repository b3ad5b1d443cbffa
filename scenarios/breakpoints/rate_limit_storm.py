"""Scenario 15: a storm of jobs against a rate-limited provider with no certified fallback
(issue 43). The provider's 429s leave attempts waiting, never failed; every job succeeds,
each runs once at the provider, and the gateway keeps to the limit it learns, so few
calls are turned away."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from typing import Any

import httpx

from providers.simulator.control_client import SimulatorControl
from scenarios.context import ScenarioContext
from scenarios.fleet import Posted, executions, post_many, providers, settle, share, winner
from scenarios.model import MarkKind, TimelineMark
from scenarios.registry import scenario
from scenarios.setup import SIM_ANTHROPIC, SIM_OPENAI
from scenarios.stage import Stage, provider_body, stage

NAME = "rate-limit-storm"
RATE = 10.0  # requests per second the simulated sim-openai lets through ...
BURST = 5  # ... after a full bucket of this many
#: Another application on the same API key takes this many requests per second of the
#: limit while the storm lasts: answers' rate-limit headers are stale by the next call, so
#: some of the gateway's calls find no token (429) and wait.
NEIGHBOUR_RATE = 2.0
CLIENTS = 8  # concurrent clients, each posting its jobs one after another
JOBS_PER_CLIENT = 10
JOBS = CLIENTS * JOBS_PER_CLIENT
MAX_429_SHARE = 0.25  # of sim-openai's calls, at most this share answered 429
#: Seconds every job gets to succeed: the limit alone needs (JOBS - BURST) / RATE.
SETTLE_WITHIN = 45.0
QUEUE_RECOUNT = 5.0  # seconds GET /v1/providers gets to recount an empty queue
CAPACITY = {"patience": 5.0, "backoff_base": 0.5, "backoff_max": 5.0}


@scenario(
    NAME,
    "A rate-limited primary, no certified fallback, a storm of jobs: all succeed, each once",
    order=15,
)
async def rate_limit_storm(ctx: ScenarioContext) -> None:
    """Limit sim-openai to 10 req/s (burst 5); 8 clients post 80 jobs at once while a
    neighbour on the same key takes 2 req/s of it."""
    s = await stage(ctx, capacity=CAPACITY)  # an empty registry: the fallback is uncertified
    ctx.action(f"{SIM_OPENAI} limited to {RATE:g} req/s, burst {BURST}")
    limits = await SimulatorControl(ctx.http, s.sim.base_url).limit(SIM_OPENAI, RATE, BURST)
    ctx.note(f"the simulator's limits: {limits}")

    ctx.action(f"a neighbour on the same key sends {NEIGHBOUR_RATE:g} req/s to {SIM_OPENAI}")
    neighbour = asyncio.create_task(neighbour_calls(ctx, s))
    try:
        await storm(ctx, s)
    finally:
        neighbour.cancel()
        await asyncio.gather(neighbour, return_exceptions=True)


async def storm(ctx: ScenarioContext, s: Stage) -> None:
    """Post the jobs from the clients at once, wait for them, check and count."""
    ctx.action(f"{CLIENTS} clients post {JOBS} jobs")
    started = time.monotonic()

    async def client(c: int) -> list[Posted]:
        posted = []
        for n in range(c, JOBS, CLIENTS):
            # The first job's exchange is the report's example; the rest are not recorded.
            posted.append(await post_many(ctx, s, "storm", n, record=n == 0))
        return posted

    posted = [
        p for batch in await asyncio.gather(*(client(c) for c in range(CLIENTS))) for p in batch
    ]
    posting = time.monotonic() - started
    ctx.expect(
        len({p.job_id for p in posted}) == JOBS,
        f"{JOBS} keys made {JOBS} jobs, each answered 201",
        f"{len(posted)} answers, {len({p.job_id for p in posted})} job ids",
    )

    waiting_seen: Counter[str] = Counter()  # why jobs waited, as the job view said it
    waited: set[str] = set()

    def look(jobs: dict[str, dict[str, Any]]) -> None:
        for job_id, job in jobs.items():
            block = job.get("waiting")
            if job.get("status") == "queued" and isinstance(block, dict):
                if job_id not in waited:
                    waiting_seen[str(block.get("reason"))] += 1
                waited.add(job_id)

    jobs = await settle(ctx, s, (p.job_id for p in posted), SETTLE_WITHIN, look)
    drained = time.monotonic() - started
    ctx.action(f"all {JOBS} jobs settled")
    statuses = Counter(str(j.get("status")) for j in jobs.values())
    ctx.expect(
        statuses == Counter({"succeeded": JOBS}),
        f"every one of the {JOBS} jobs succeeds (0 failed)",
        str(dict(statuses)),
    )
    winners = Counter(str(winner(j).get("provider")) for j in jobs.values())
    ctx.expect(
        winners == Counter({SIM_OPENAI: JOBS}),
        f"every job succeeds on {SIM_OPENAI} with one attempt",
        f"winners {dict(winners)}; attempts per job "
        f"{dict(Counter(len(j['attempts']) for j in jobs.values()))}",
    )
    ctx.expect(
        all(len(j["attempts"]) == 1 for j in jobs.values()),
        "no job needed a second attempt: a 429 is waited out, never a failure",
        str(dict(Counter(len(j["attempts"]) for j in jobs.values()))),
    )

    logged = await ctx.sim_calls(s.sim, SIM_OPENAI)
    calls = [c for c in logged if str(c.get("idempotency_key") or "").startswith("job_")]
    theirs = [c for c in logged if c not in calls]
    per_key, per_job = executions(calls)
    twice = {k: n for k, n in per_key.items() if n > 1}
    ctx.expect(
        not twice and all(per_job[j] == 1 for j in jobs),
        "each job ran exactly once at the provider (one 200 per downstream key and per job)",
        f"keys run twice: {twice}; jobs without exactly one: "
        f"{[j for j in jobs if per_job[j] != 1][:5]}",
    )
    limited = sum(1 for c in calls if c.get("behaviour") == "rate_limited")
    ratio = share(limited, len(calls))
    ctx.expect(
        ratio <= MAX_429_SHARE,
        f"at most {MAX_429_SHARE:.0%} of {SIM_OPENAI}'s calls were answered 429",
        f"{limited} of {len(calls)} ({ratio:.0%})",
    )
    refused = {str(c.get("idempotency_key")) for c in calls if c.get("status") == 429}
    ctx.expect(
        all(per_key[k] == 1 for k in refused),
        "every call answered 429 was sent again under the same downstream key and ran once",
        f"{len(refused)} keys answered 429; runs: {sorted(per_key[k] for k in refused)}",
    )
    other = await ctx.sim_calls(s.sim, SIM_ANTHROPIC)
    ctx.expect(
        not other, f"the uncertified {SIM_ANTHROPIC} was never called", f"{len(other)} calls"
    )

    waits = sum(int(a.get("waits") or 0) for j in jobs.values() for a in j["attempts"])
    row = await drained_row(ctx, s)
    ctx.expect(
        row.get("queued") == 0 and row.get("waiting") == 0,
        f"GET /v1/providers: nothing left queued or waiting for {SIM_OPENAI}",
        f"circuit={row.get('circuit')} queued={row.get('queued')} waiting={row.get('waiting')} "
        f"pace={row.get('pace_requests_per_minute')}/min",
    )
    first_call = min(float(c["received_at"]) for c in calls)
    last_call = max(float(c["received_at"]) for c in calls)
    span = last_call - first_call
    ctx.note(
        f"{JOBS} jobs from {CLIENTS} clients, posted in {posting:.1f} s, all succeeded "
        f"{drained:.1f} s after the first post; {SIM_OPENAI} limited to {RATE:g} req/s "
        f"(burst {BURST}): the gateway's {len(calls)} calls, {len(per_key)} run, "
        f"{limited} answered 429 "
        f"({ratio:.1%}); throughput {share(len(per_key), span):.1f} jobs/s over {span:.1f} s "
        f"of calls; {len(waited)} jobs seen waiting in the job view "
        f"({dict(waiting_seen) or 'none'}), {waits} waits counted on the attempts; "
        f"the neighbour's {len(theirs)} calls: "
        f"{sum(1 for c in theirs if c.get('status') == 429)} answered 429; "
        f"the gateway's pace for {SIM_OPENAI}: {row.get('pace_requests_per_minute')} req/min"
    )

    lane = f"{SIM_OPENAI} · the gateway's calls answered 429"
    for call in (c for c in calls if c.get("status") == 429):
        at = ctx.rel(float(call["received_at"]))
        ctx.timeline.append(
            TimelineMark(at, lane, MarkKind.CALL_RECEIVED, str(call.get("idempotency_key")))
        )
    ordered = sorted(jobs.values(), key=lambda j: str(j.get("created_at")))
    watch = [ordered[0]]
    patient = [j for j in ordered if any(int(a.get("waits") or 0) for a in j["attempts"])]
    if patient:
        watch.append(patient[0])
    for n, job in enumerate(watch):
        ctx.watch(s.gateway, s.key, str(job["id"]), s.sim, "first job" if n == 0 else "waited")


async def drained_row(ctx: ScenarioContext, s: Stage) -> dict[str, Any]:
    """Return sim-openai's row of ``GET /v1/providers`` once its queue counts are zero (they
    are counted every ``[admission] interval``, 1 s), or as it is after a few seconds."""
    deadline = time.monotonic() + QUEUE_RECOUNT
    row = (await providers(ctx, s)).get(SIM_OPENAI, {})
    while (row.get("queued"), row.get("waiting")) != (0, 0) and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        row = (await providers(ctx, s)).get(SIM_OPENAI, {})
    return row


async def neighbour_calls(ctx: ScenarioContext, s: Stage) -> None:
    """Call sim-openai directly, as another application on the same key, until cancelled."""
    url = f"{s.sim.base_url}/p/{SIM_OPENAI}/v1/chat/completions"
    body = provider_body(ctx, s.contract)
    while True:
        with contextlib.suppress(httpx.HTTPError):
            await ctx.request("POST", url, actor="neighbour", json_body=body, record=False)
        await asyncio.sleep(1.0 / NEIGHBOUR_RATE)
