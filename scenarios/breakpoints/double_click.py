"""Scenario 1: two, then fifty, identical POSTs at once make one job and one provider call."""

from __future__ import annotations

from collections import Counter

from scenarios.context import ScenarioContext, brief, listed
from scenarios.harness import Process
from scenarios.registry import scenario
from scenarios.stage import concurrent_posts, job_id_of, stage

NAME = "double-click"
SETTLE = 1.5  # seconds to wait for a second, wrong provider call to show up


async def click_burst(
    ctx: ScenarioContext,
    gateways: list[Process],
    key: str,
    contract: str,
    sim: Process,
    clicks: int,
    idempotency_key: str,
    seed: int,
) -> str:
    """Send ``clicks`` identical POSTs at once; check one job, one 201, one provider call."""
    body = ctx.job_body(contract, seed=seed)
    ctx.action(f"{clicks} identical POSTs ({idempotency_key})")
    responses = await concurrent_posts(ctx, gateways, key, idempotency_key, body, clicks)
    statuses = Counter(r.status_code for r in responses)
    ids = {job_id_of(r) for r in responses}
    ctx.expect(
        set(statuses) <= {200, 201},
        f"{clicks} clicks: every answer is 201 or 200",
        f"statuses {dict(statuses)}",
    )
    ctx.expect(
        len(ids) == 1 and None not in ids,
        f"{clicks} clicks: one job id",
        f"ids {sorted(str(i) for i in ids)}",
    )
    ctx.expect(
        statuses[201] == 1,
        f"{clicks} clicks: exactly one 201 Created",
        f"statuses {dict(statuses)}",
    )
    replays = [r for r in responses if r.status_code == 200]
    ctx.expect(
        all(r.headers.get("idempotent-replayed") == "true" for r in replays),
        f"{clicks} clicks: every 200 says Idempotent-Replayed: true",
    )
    job_id = next(iter(ids))
    assert job_id is not None
    ctx.watch(gateways[0], key, job_id, sim, label=f"{clicks} clicks")
    gateway = gateways[0]
    job = await ctx.wait_job(
        gateway,
        key,
        job_id,
        lambda j: j.get("status") == "succeeded",
        15.0,
        f"{clicks} clicks: the job succeeds",
    )
    ctx.expect(len(job["attempts"]) == 1, f"{clicks} clicks: one attempt", brief(job))
    await ctx.wait_calls(sim, 2, SETTLE)
    calls = [c for c in await ctx.sim_calls(sim) if job_id in str(c.get("idempotency_key"))]
    ctx.expect(
        len(calls) == 1, f"{clicks} clicks: one provider call", f"{len(calls)} calls carry {job_id}"
    )
    listing = await ctx.request(
        "GET", f"{gateway.base_url}/v1/jobs?limit=100", key=key, record=False
    )
    if listing.status_code == 200:
        mine = [j for j in listed(listing, "jobs") if j["idempotency_key"] == idempotency_key]
        ctx.expect(
            len(mine) == 1,
            f"{clicks} clicks: the job list shows one job for the key",
            f"{len(mine)} jobs",
        )
    return job_id


@scenario(NAME, "Two, then 50, concurrent identical POSTs make one job, one 201, one call", order=1)
async def double_click(ctx: ScenarioContext) -> None:
    """Fire 2 then 50 identical POSTs at one gateway."""
    s = await stage(ctx)
    first = await click_burst(ctx, [s.gateway], s.key, s.contract, s.sim, 2, "dc-two", 0)
    second = await click_burst(ctx, [s.gateway], s.key, s.contract, s.sim, 50, "dc-fifty", 1)
    ctx.expect(first != second, "different keys make different jobs", f"{first} vs {second}")
    calls = await ctx.sim_calls(s.sim)
    ctx.expect(len(calls) == 2, "two bursts cost two provider calls in all", f"{len(calls)} calls")
