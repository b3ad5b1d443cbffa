"""Scenario 3: a hanging provider makes the attempt unknown, which blocks until resolved."""

from __future__ import annotations

import asyncio

from scenarios.context import ScenarioContext, brief, winner_of
from scenarios.registry import scenario
from scenarios.setup import SIM_ANTHROPIC, SIM_OPENAI
from scenarios.stage import create_watched_job, stage

NAME = "timeout-unknown"
DEADLINE = 1.5  # seconds, the primary's attempt deadline in this scenario
IN_PROGRESS = "urn:onejob:attempt-in-progress"


@scenario(
    NAME, "A hanging provider: attempt and job unknown, nothing retried until resolved", order=3
)
async def timeout_unknown(ctx: ScenarioContext) -> None:
    """Hang the primary past its deadline, then resolve the unknown attempt as an admin."""
    s = await stage(ctx, certified=True, admin=True, openai_timeout=DEADLINE)
    await ctx.script(s.sim, SIM_OPENAI, [{"kind": "hang"}])
    job_id = await create_watched_job(ctx, s, "tu-1", ctx.job_body(s.contract), wait=15)
    job = await ctx.wait_job(
        s.gateway,
        s.key,
        job_id,
        lambda j: j.get("status") == "unknown",
        DEADLINE + 10.0,
        "the job becomes unknown after the deadline",
    )
    ctx.observe_unknown(job)
    first = job["attempts"][0]
    ctx.expect(
        first.get("state") == "unknown", "the timed-out attempt is unknown, not failed", brief(job)
    )
    ctx.expect(len(job["attempts"]) == 1, "no fallback attempt was created", brief(job))

    ctx.action("fallback button while unknown")
    manual = await ctx.request(
        "POST",
        f"{s.gateway.base_url}/v1/jobs/{job_id}/attempts",
        key=s.key,
        json_body={"provider": SIM_ANTHROPIC},
    )
    ctx.expect(
        manual.status_code == 409,
        "a manual attempt is refused with 409",
        f"status {manual.status_code}: {manual.text[:300]}",
    )
    ctx.expect(
        manual.json().get("type") == IN_PROGRESS,
        f"the problem type is {IN_PROGRESS}",
        str(manual.json().get("type")),
    )
    ctx.expect(
        str(first.get("id")) in manual.text, "the 409 names the blocking attempt", manual.text[:300]
    )
    await asyncio.sleep(1.0)  # give a wrong automatic fallback time to show itself
    ctx.expect(not await ctx.sim_calls(s.sim, SIM_ANTHROPIC), "no call reached the fallback")

    forbidden = await ctx.request(
        "GET", f"{s.gateway.base_url}/v1/admin/attempts?state=unknown", key=s.key, actor="client"
    )
    ctx.expect(
        forbidden.status_code == 403,
        "a non-admin key cannot list unknown attempts",
        f"status {forbidden.status_code}",
    )
    pending = await ctx.request(
        "GET",
        f"{s.gateway.base_url}/v1/admin/attempts?state=unknown",
        key=s.admin_key,
        actor="admin",
    )
    ctx.expect(
        pending.status_code == 200 and str(first.get("id")) in pending.text,
        "the admin list shows the unknown attempt",
        f"status {pending.status_code}",
    )

    ctx.action("admin resolves attempt 1 as failed")
    resolve_url = f"{s.gateway.base_url}/v1/admin/attempts/{first['id']}/resolve"
    body = {"outcome": "failed", "note": "the provider's log shows the request never ran"}
    resolved = await ctx.request(
        "POST", resolve_url, key=s.admin_key, actor="admin", json_body=body
    )
    ctx.expect(
        resolved.status_code in (200, 202),
        "the admin resolution is accepted",
        f"status {resolved.status_code}: {resolved.text[:300]}",
    )
    again = await ctx.request("POST", resolve_url, key=s.admin_key, actor="admin", json_body=body)
    ctx.expect(
        again.status_code == 409,
        "resolving a second time is 409 (only from unknown)",
        f"status {again.status_code}",
    )

    job = await ctx.wait_job(
        s.gateway,
        s.key,
        job_id,
        lambda j: len(j["attempts"]) > 1 or j.get("status") in ("failed", "succeeded"),
        5.0,
        "the resolution moves the job on",
    )
    attempts = job["attempts"]
    ctx.expect(
        len(attempts) == 2
        and attempts[1].get("reason") == "failover"
        and attempts[1].get("provider") == SIM_ANTHROPIC,
        "resolving as failed fails over to the certified fallback by itself",
        brief(job),
    )
    job = await ctx.wait_job(
        s.gateway,
        s.key,
        job_id,
        lambda j: j.get("status") == "succeeded",
        10.0,
        "the job succeeds on the fallback",
    )
    winner = winner_of(job)
    ctx.expect(winner.get("provider") == SIM_ANTHROPIC, "the fallback's attempt won", brief(job))
    ctx.expect(
        len(await ctx.sim_calls(s.sim, SIM_OPENAI)) == 1,
        "the primary was called once, never retried",
    )
    ctx.expect(
        len(await ctx.sim_calls(s.sim, SIM_ANTHROPIC)) == 1,
        "the fallback was called once, after the resolution",
    )
