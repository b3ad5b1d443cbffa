"""Scenario 4: the hedge answers first and wins; the slow primary's late answer is dropped."""

from __future__ import annotations

import json

from scenarios.context import ScenarioContext, attempt_number, brief, winner_of
from scenarios.registry import scenario
from scenarios.setup import SIM_ANTHROPIC, SIM_OPENAI
from scenarios.stage import create_watched_job, stage

NAME = "reverse-order-finish"
PRIMARY_DELAY = 2.5  # seconds the primary takes to answer
HEDGE_AFTER = 0.5  # seconds before the dispatcher hedges on the fallback


@scenario(
    NAME, "Slow primary, fast hedge: the second to return loses, though it was primary", order=4
)
async def reverse_order_finish(ctx: ScenarioContext) -> None:
    """Delay the primary past the hedge threshold and watch the CAS drop its late answer."""
    s = await stage(ctx, certified=True, hedgeable=True, hedge_after_s=HEDGE_AFTER)
    await ctx.script(s.sim, SIM_OPENAI, [{"kind": "delay", "seconds": PRIMARY_DELAY}])
    job_id = await create_watched_job(ctx, s, "rof-1", ctx.job_body(s.contract), wait=15)
    won = await ctx.wait_job(
        s.gateway,
        s.key,
        job_id,
        lambda j: j.get("status") == "succeeded",
        PRIMARY_DELAY + 5.0,
        "the job succeeds",
    )
    ctx.action("job succeeded (seen by the client)")
    winner = winner_of(won)
    ctx.expect(
        winner.get("provider") == SIM_ANTHROPIC and winner.get("reason") == "hedge",
        "the hedge on the fallback won",
        brief(won),
    )
    done = await ctx.wait_job(
        s.gateway,
        s.key,
        job_id,
        lambda j: all(a.get("state") not in ("starting", "running") for a in j["attempts"]),
        PRIMARY_DELAY + 5.0,
        "the primary's attempt finishes",
    )
    primary = attempt_number(done, 1)
    ctx.expect(
        primary.get("provider") == SIM_OPENAI and primary.get("state") == "lost",
        "the official primary finished second and lost",
        brief(done),
    )
    calls = {c["provider"]: c for c in await ctx.sim_calls(s.sim)}
    openai, anthropic = calls.get(SIM_OPENAI, {}), calls.get(SIM_ANTHROPIC, {})
    ctx.expect(
        openai.get("status") == 200,
        "the primary really answered (200) — late",
        json.dumps(openai)[:300],
    )
    ctx.expect(
        (openai.get("finished_at") or 0) > (anthropic.get("finished_at") or 0)
        and (openai.get("received_at") or 0) < (anthropic.get("received_at") or 0),
        "the provider log shows the reverse order: primary sent first, finished last",
    )
    ctx.expect(
        {k: done.get(k) for k in ("result", "completed_by", "version", "status")}
        == {k: won.get(k) for k in ("result", "completed_by", "version", "status")},
        "the late answer changed nothing: result, winner, version, status",
        f"version {won.get('version')} -> {done.get('version')}",
    )
    ctx.expect(
        done.get("version") == 2,
        "one decision moved the version (1 -> 2)",
        f"version {done.get('version')}",
    )
    ctx.expect(
        "result" not in primary or primary.get("result") is None,
        "the losing attempt carries no payload",
        json.dumps(primary)[:300],
    )
