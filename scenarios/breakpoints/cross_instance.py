"""Scenario 8: identical POSTs split across two gateway processes on one PostgreSQL."""

from __future__ import annotations

import asyncio
from collections import Counter

from scenarios.context import ScenarioContext, brief
from scenarios.harness import free_port
from scenarios.registry import scenario
from scenarios.setup import GatewayConfig
from scenarios.stage import concurrent_posts, job_id_of, warm_simulator

NAME = "cross-instance-double-click"
CLICKS = 50


@scenario(
    NAME,
    "Identical POSTs split across two gateways on one PostgreSQL: one job",
    needs_postgres=True,
    order=8,
)
async def cross_instance(ctx: ScenarioContext) -> None:
    """Start two gateways on one database and split a burst of clicks between them."""
    sim_port = free_port()
    database_url = await ctx.fresh_db()
    config = GatewayConfig(sim_port=sim_port, certifications_path=ctx.empty_registry())
    # Gateway A migrates the database first; then B and the key need it migrated.
    sim, first = await asyncio.gather(
        ctx.simulator(port=sim_port), ctx.gateway("gateway-a", config, database_url)
    )
    second, key = await asyncio.gather(
        ctx.gateway("gateway-b", config, database_url),
        ctx.harness.create_key(database_url, "alice"),
    )
    contract = await ctx.contract(first, key)
    await warm_simulator(ctx, sim, contract)
    body = ctx.job_body(contract)
    ctx.action(f"{CLICKS} identical POSTs, alternating between two gateways")
    responses = await concurrent_posts(ctx, [first, second], key, "xi-1", body, CLICKS)
    statuses = Counter(r.status_code for r in responses)
    ids = {job_id_of(r) for r in responses}
    ctx.expect(
        set(statuses) <= {200, 201}, "every answer is 201 or 200", f"statuses {dict(statuses)}"
    )
    ctx.expect(
        len(ids) == 1 and None not in ids,
        "one job id across both gateways",
        f"ids {sorted(str(i) for i in ids)}",
    )
    ctx.expect(statuses[201] == 1, "exactly one 201 Created", f"statuses {dict(statuses)}")
    job_id = next(iter(ids))
    assert job_id is not None
    ctx.watch(first, key, job_id, sim)
    for gateway in (first, second):
        job = await ctx.wait_job(
            gateway,
            key,
            job_id,
            lambda j: j.get("status") == "succeeded",
            15.0,
            f"{gateway.name} sees the job succeed",
        )
        ctx.expect(len(job["attempts"]) == 1, f"{gateway.name} sees one attempt", brief(job))
    await ctx.wait_calls(sim, 2, 1.5)
    calls = await ctx.sim_calls(sim)
    ctx.expect(len(calls) == 1, "one provider call from two gateways", f"{len(calls)} calls")
