"""Scenario 7: an uncertified fallback is never called; after ``onejob certify`` it is."""

from __future__ import annotations

import asyncio

from reports.lines import clipped
from scenarios.certs import CERTIFY_TIMEOUT, certify_args
from scenarios.context import ScenarioContext, brief, winner_of
from scenarios.harness import HarnessError
from scenarios.registry import scenario
from scenarios.setup import SIM_ANTHROPIC, SIM_OPENAI
from scenarios.stage import create_watched_job, job_id_of, post_job, stage

NAME = "uncertified-fallback"


@scenario(
    NAME,
    "Primary fails definitively, fallback uncertified: failed, zero fallback calls",
    timeout=CERTIFY_TIMEOUT + 60.0,
    order=7,
)
async def uncertified_fallback(ctx: ScenarioContext) -> None:
    """Fail the primary with 500 before and after certifying the fallback."""
    s = await stage(ctx)
    await ctx.script(s.sim, SIM_OPENAI, [{"kind": "status", "code": 500}])
    job_id = await create_watched_job(
        ctx, s, "uf-1", ctx.job_body(s.contract), wait=15, label="before"
    )
    job = await ctx.wait_job(
        s.gateway, s.key, job_id, lambda j: j.get("status") == "failed", 10.0, "the job fails"
    )
    ctx.expect(
        len(job["attempts"]) == 1 and job["attempts"][0].get("state") == "failed",
        "one attempt, failed definitely",
        brief(job),
    )
    await asyncio.sleep(0.5)
    ctx.expect(not await ctx.sim_calls(s.sim, SIM_ANTHROPIC), "zero calls to the fallback")
    manual = await ctx.request(
        "POST",
        f"{s.gateway.base_url}/v1/jobs/{job_id}/attempts",
        key=s.key,
        json_body={"provider": SIM_ANTHROPIC},
    )
    ctx.expect(
        manual.status_code == 422 and "fallback-not-certified" in manual.text,
        "the fallback button is 422 fallback-not-certified",
        f"status {manual.status_code}: {manual.text[:300]}",
    )

    ctx.action("onejob certify --mode live")
    code, out, err = await ctx.harness.run_cli(
        *certify_args(
            s.config_path, s.config.certifications_path, ctx.harness.work_dir / "certify-report"
        ),
        timeout=CERTIFY_TIMEOUT,
    )
    if code != 0:
        raise HarnessError(f"onejob certify exited {code}: {(err or out)[-600:]}")
    gate = await ctx.harness.run_cli(
        "can-i-failover",
        "--contract",
        s.contract,
        "--from",
        SIM_OPENAI,
        "--to",
        SIM_ANTHROPIC,
        "--config",
        str(s.config_path),
        "--registry",
        str(s.config.certifications_path),
    )
    # Its answer opens the output ("yes: …" or "no: …"): the detail keeps the start.
    ctx.expect(
        gate[0] == 0, "can-i-failover now says yes", clipped((gate[1] + gate[2]).strip(), 300)
    )
    calls_before = len(await ctx.sim_calls(s.sim))
    await ctx.script(s.sim, SIM_OPENAI, [{"kind": "status", "code": 500}])
    created = await post_job(ctx, s.gateway, s.key, "uf-2", ctx.job_body(s.contract), wait=15)
    job_id = job_id_of(created) or ""
    ctx.watch(s.gateway, s.key, job_id, s.sim, label="after")
    job = await ctx.wait_job(
        s.gateway,
        s.key,
        job_id,
        lambda j: j.get("status") == "succeeded",
        10.0,
        "after certification the same setup fails over and succeeds",
    )
    winner = winner_of(job)
    ctx.expect(
        winner.get("provider") == SIM_ANTHROPIC and winner.get("reason") == "failover",
        "the failover attempt on the fallback won",
        brief(job),
    )
    new_calls = (await ctx.sim_calls(s.sim))[calls_before:]
    ctx.expect(
        sum(1 for c in new_calls if c.get("provider") == SIM_ANTHROPIC) == 1,
        "the fallback was called once",
        f"{len(new_calls)} new calls",
    )
