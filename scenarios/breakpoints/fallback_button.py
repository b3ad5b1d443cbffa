"""Scenario 5: the fallback button while the first attempt is in flight or unknown is 409."""

from __future__ import annotations

import asyncio

from scenarios.context import ScenarioContext, brief, listed
from scenarios.registry import scenario
from scenarios.setup import SIM_ANTHROPIC, SIM_OPENAI
from scenarios.stage import create_watched_job, stage

NAME = "fallback-button-during-unknown"
DEADLINE = 1.5  # seconds, the primary's attempt deadline in this scenario
IN_PROGRESS = "urn:onejob:attempt-in-progress"


@scenario(
    NAME, "The fallback button during an unknown attempt: 409, one job, no second call", order=5
)
async def fallback_button(ctx: ScenarioContext) -> None:
    """Click the fallback button while the first attempt runs, and again once it is unknown."""
    s = await stage(ctx, certified=True, openai_timeout=DEADLINE)
    await ctx.script(s.sim, SIM_OPENAI, [{"kind": "hang"}])
    job_id = await create_watched_job(ctx, s, "fb-1", ctx.job_body(s.contract))
    await ctx.wait_calls(s.sim, 1, 5.0)
    url = f"{s.gateway.base_url}/v1/jobs/{job_id}/attempts"
    ctx.action("fallback button while running")
    early = await ctx.request("POST", url, key=s.key, json_body={"provider": SIM_ANTHROPIC})
    ctx.expect(
        early.status_code == 409,
        "the button while the attempt runs is 409",
        f"status {early.status_code}: {early.text[:300]}",
    )
    job = await ctx.wait_job(
        s.gateway,
        s.key,
        job_id,
        lambda j: j.get("status") == "unknown",
        DEADLINE + 10.0,
        "the job becomes unknown",
    )
    ctx.observe_unknown(job)
    blocking = job["attempts"][0]
    ctx.action("fallback button, 3 clicks, while unknown")
    clicks = await asyncio.gather(
        *(
            ctx.request(
                "POST",
                url,
                key=s.key,
                json_body={"provider": SIM_ANTHROPIC},
                actor=f"click#{i + 1}",
            )
            for i in range(3)
        )
    )
    for i, click in enumerate(clicks, start=1):
        ctx.expect(
            click.status_code == 409,
            f"click {i} during unknown is 409",
            f"status {click.status_code}: {click.text[:300]}",
        )
    problem = clicks[0].json()
    ctx.expect(
        problem.get("type") == IN_PROGRESS,
        f"the problem type is {IN_PROGRESS}",
        str(problem.get("type")),
    )
    ctx.expect(
        str(blocking.get("id")) in clicks[0].text and "unknown" in clicks[0].text,
        "the problem names the blocking attempt and its state",
        clicks[0].text[:300],
    )
    await asyncio.sleep(1.0)  # a wrongly accepted click would reach the simulator by now
    job = (await ctx.request("GET", f"{s.gateway.base_url}/v1/jobs/{job_id}", key=s.key)).json()
    ctx.expect(len(job["attempts"]) == 1, "still one attempt", brief(job))
    ctx.expect(job.get("status") == "unknown", "the job stays unknown", brief(job))
    ctx.expect(not await ctx.sim_calls(s.sim, SIM_ANTHROPIC), "no call reached the fallback")
    ctx.expect(len(await ctx.sim_calls(s.sim)) == 1, "one provider call in all")
    listing = await ctx.request("GET", f"{s.gateway.base_url}/v1/jobs", key=s.key)
    ctx.expect(
        listing.status_code == 200 and len(listed(listing, "jobs")) == 1,
        "the owner has one job",
        listing.text[:200],
    )
