"""Scenario 2: the same key with a different input is a 409 that leaves the job alone."""

from __future__ import annotations

from scenarios.context import ScenarioContext, brief
from scenarios.registry import scenario
from scenarios.stage import create_watched_job, job_id_of, post_job, stage

NAME = "divergent-key"
REUSED = "urn:onejob:idempotency-key-reused"


@scenario(
    NAME, "Same key, different input: 409 naming the existing job, which is unchanged", order=2
)
async def divergent_key(ctx: ScenarioContext) -> None:
    """Reuse a key with a different input, after and while the first job runs."""
    s = await stage(ctx)
    original = ctx.job_body(s.contract, seed=0)
    job_id = await create_watched_job(
        ctx, s, "dk-1", original, wait=15, what="the first POST creates the job"
    )
    before = await ctx.wait_job(
        s.gateway,
        s.key,
        job_id,
        lambda j: j.get("status") == "succeeded",
        15.0,
        "the original job succeeds",
    )
    ctx.action("POST with the same key and a different input")
    other = ctx.job_body(s.contract, seed=1)
    ctx.expect(other["input"] != original["input"], "the second input differs from the first")
    conflict = await post_job(ctx, s.gateway, s.key, "dk-1", other)
    ctx.expect(
        conflict.status_code == 409,
        "the divergent POST is 409 Conflict",
        f"status {conflict.status_code}: {conflict.text[:300]}",
    )
    ctx.expect(
        conflict.headers.get("content-type", "").startswith("application/problem+json"),
        "the 409 is an RFC 9457 problem",
        conflict.headers.get("content-type", ""),
    )
    problem = conflict.json()
    ctx.expect(
        problem.get("type") == REUSED, f"the problem type is {REUSED}", str(problem.get("type"))
    )
    ctx.expect(
        job_id in conflict.text, "the problem names the existing job id", conflict.text[:300]
    )
    # Same again with the provider named: the fingerprint covers the provider too.
    named = await post_job(ctx, s.gateway, s.key, "dk-1", {**original, "provider": "sim-anthropic"})
    ctx.expect(
        named.status_code == 409,
        "same input but another provider is also 409",
        f"status {named.status_code}",
    )
    after = await ctx.request("GET", f"{s.gateway.base_url}/v1/jobs/{job_id}", key=s.key)
    ctx.expect(
        after.json() == before,
        "the original job is unchanged, result and version",
        f"before {brief(before)} v{before.get('version')}, "
        f"after {brief(after.json())} v{after.json().get('version')}",
    )
    replay = await post_job(ctx, s.gateway, s.key, "dk-1", original)
    ctx.expect(
        replay.status_code == 200 and job_id_of(replay) == job_id,
        "the original request still replays the original job",
        f"status {replay.status_code}",
    )
    ctx.expect(
        replay.json().get("result") == before.get("result"),
        "the replay carries the original result",
    )
    calls = await ctx.sim_calls(s.sim)
    ctx.expect(len(calls) == 1, "one provider call in all", f"{len(calls)} calls")
