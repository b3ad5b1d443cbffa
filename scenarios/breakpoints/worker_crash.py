"""Scenario 6: SIGKILL the gateway mid-call; after the lease the attempt is unknown, not re-run."""

from __future__ import annotations

import asyncio

from scenarios.context import ScenarioContext, brief
from scenarios.registry import scenario
from scenarios.setup import SIM_OPENAI
from scenarios.stage import create_watched_job, stage

NAME = "worker-crash"
LEASE_TTL = 2.0  # seconds a runner's lease lasts without renewal
CALL_TIME = 6.0  # seconds the provider takes (the crash happens long before)
DEADLINE = 30.0  # seconds, the attempt deadline: far away, so only the lease can expire


@scenario(NAME, "SIGKILL the gateway mid-call: the attempt becomes unknown, never re-run", order=6)
async def worker_crash(ctx: ScenarioContext) -> None:
    """Kill the gateway while its provider call is in flight, restart it, watch the lease."""
    s = await stage(ctx, lease_ttl=LEASE_TTL, reap_interval=0.3, openai_timeout=DEADLINE)
    await ctx.script(s.sim, SIM_OPENAI, [{"kind": "delay", "seconds": CALL_TIME}])
    job_id = await create_watched_job(ctx, s, "wc-1", ctx.job_body(s.contract))
    calls = await ctx.wait_calls(s.sim, 1, 10.0)
    ctx.expect(len(calls) == 1, "the provider call is in flight", f"{len(calls)} calls")
    ctx.action("SIGKILL gateway")
    await s.gateway.crash()
    await asyncio.sleep(0.2)
    ctx.action("restart gateway")
    await ctx.harness.restart(s.gateway)
    job = await ctx.wait_job(
        s.gateway,
        s.key,
        job_id,
        lambda j: j.get("status") == "unknown",
        LEASE_TTL + 10.0,
        "after the lease expires the job is unknown",
    )
    ctx.observe_unknown(job)
    attempt = job["attempts"][0]
    ctx.expect(attempt.get("state") == "unknown", "the crashed attempt is unknown", brief(job))
    await asyncio.sleep(LEASE_TTL + 1.0)  # several reaper rounds: a re-run would show now
    job = (await ctx.request("GET", f"{s.gateway.base_url}/v1/jobs/{job_id}", key=s.key)).json()
    ctx.expect(len(job["attempts"]) == 1, "no new attempt was made", brief(job))
    ctx.expect(job.get("status") == "unknown", "the job stays unknown until resolved", brief(job))
    calls = await ctx.sim_calls(s.sim)
    ctx.expect(len(calls) == 1, "the provider was called once, never re-run", f"{len(calls)} calls")
