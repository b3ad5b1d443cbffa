"""Scenario 11: an unknown attempt resolved by evidence: the reconciler asks the provider.

Part 1: the provider answers after the attempt's deadline. The attempt is ``unknown`` and
blocks new attempts; the simulator still finishes and stores the completion (``store:
true``, ``metadata.onejob_key``); the reconciler finds it, and the job succeeds with exactly
that answer, after one provider execution. Part 2: the request is lost before the provider
runs it. The reconciler finds nothing, which proves nothing: the attempt stays ``unknown``
until the operator resolves it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from scenarios.context import ScenarioContext, brief, listed, winner_of
from scenarios.harness import Process
from scenarios.registry import scenario
from scenarios.setup import SIM_ANTHROPIC, SIM_OPENAI
from scenarios.stage import Stage, create_watched_job, stage

NAME = "unknown-resolved-by-reconciler"
DEADLINE = 1.5  # seconds, sim-openai's attempt deadline
LATE = 1.5  # seconds the provider takes beyond the deadline
IN_PROGRESS = "urn:onejob:attempt-in-progress"


@scenario(
    NAME, "An answer after the deadline: unknown, then resolved by the provider's record", order=11
)
async def reconciler_unknown(ctx: ScenarioContext) -> None:
    """Answer late (the reconciler finds it), then lose a request (only a person can tell)."""
    s = await stage(
        ctx,
        certified=True,
        admin=True,
        openai_timeout=DEADLINE,
        openai_reconcile=True,
        reconcile_interval=0.5,
        reconcile_grace=0.5,
    )
    await answered_late(ctx, s)
    await never_ran(ctx, s)


async def answered_late(ctx: ScenarioContext, s: Stage) -> None:
    """The provider finishes after the client gave up; the reconciler finds its answer."""
    await ctx.script(s.sim, SIM_OPENAI, [{"kind": "delay", "seconds": DEADLINE + LATE}])
    job_id = await create_watched_job(
        ctx, s, "rec-late", ctx.job_body(s.contract), label="late answer"
    )
    job = await ctx.wait_job(
        s.gateway,
        s.key,
        job_id,
        lambda j: j.get("status") == "unknown",
        DEADLINE + 5.0,
        "the job becomes unknown at the deadline",
    )
    ctx.observe_unknown(job, "late answer")
    first = job["attempts"][0]
    ctx.action("fallback button while unknown")
    manual = await ctx.request(
        "POST",
        f"{s.gateway.base_url}/v1/jobs/{job_id}/attempts",
        key=s.key,
        json_body={"provider": SIM_ANTHROPIC},
    )
    ctx.expect(
        manual.status_code == 409 and manual.json().get("type") == IN_PROGRESS,
        "a new attempt is refused while the attempt is unknown",
        f"status {manual.status_code}: {manual.text[:300]}",
    )

    job = await ctx.wait_job(
        s.gateway,
        s.key,
        job_id,
        lambda j: j.get("status") == "succeeded",
        LATE + 10.0,
        "the reconciler resolves the job by itself",
    )
    ctx.action("job succeeded by the reconciler")
    ctx.expect(
        winner_of(job).get("id") == first["id"] and len(job["attempts"]) == 1,
        "the unknown attempt itself won; no other attempt was made",
        brief(job),
    )
    stored = await stored_completions(ctx, s.sim, f"{job_id}/1")
    ctx.expect(
        len(stored) == 1,
        "the provider stored one completion under the attempt's key",
        json.dumps(stored)[:300],
    )
    answer = json.loads(stored[0]["choices"][0]["message"]["content"])
    ctx.expect(
        job.get("result") == answer,
        "the job's result is exactly the stored answer",
        f"result {job.get('result')!r} vs stored {answer!r}",
    )
    calls = [c for c in await ctx.sim_calls(s.sim) if job_id in str(c.get("idempotency_key"))]
    ctx.expect(len(calls) == 1, "one provider execution in total", f"{len(calls)} calls")
    ctx.expect(
        calls[0].get("stored_id") == stored[0]["id"],
        "that execution is the completion the reconciler found",
        json.dumps(calls[0]),
    )
    resolved = await resolution(ctx, s, job_id)
    evidence = resolved.get("evidence") or {}
    ctx.expect(
        evidence.get("completion_id") == stored[0]["id"]
        and bool(evidence.get("last_checked_at"))
        and resolved.get("won") is True,
        "the audit event names the evidence: the completion id and when it was looked up",
        json.dumps(resolved)[:400],
    )


async def never_ran(ctx: ScenarioContext, s: Stage) -> None:
    """The request is lost before the provider runs it: not found, stays unknown."""
    await ctx.script(s.sim, SIM_OPENAI, [{"kind": "drop_unprocessed"}])
    job_id = await create_watched_job(
        ctx,
        s,
        "rec-lost",
        ctx.job_body(s.contract, seed=1),
        what="the second job is created",
        label="lost request",
    )
    job = await ctx.wait_job(
        s.gateway,
        s.key,
        job_id,
        lambda j: j.get("status") == "unknown",
        DEADLINE + 5.0,
        "a dropped connection makes the job unknown",
    )
    ctx.observe_unknown(job, "lost request")
    attempt_id = job["attempts"][0]["id"]
    finding = await wait_finding(ctx, s, attempt_id, 10.0)
    ctx.action("reconciler found nothing")
    ctx.expect(
        finding.get("finding") == "not_found",
        "the admin list shows what the reconciler last found: not_found",
        json.dumps(finding),
    )
    await asyncio.sleep(1.5)  # several more passes: absence must never decide
    job = (await ctx.request("GET", f"{s.gateway.base_url}/v1/jobs/{job_id}", key=s.key)).json()
    ctx.expect(
        job.get("status") == "unknown" and job["attempts"][0]["state"] == "unknown",
        "finding nothing leaves the attempt unknown",
        brief(job),
    )
    ctx.expect(
        not await stored_completions(ctx, s.sim, f"{job_id}/1"),
        "the provider holds no completion for the lost request",
    )

    ctx.action("admin resolves attempt 1 as failed")
    body = {"outcome": "failed", "note": "the provider's logs show the request never ran"}
    resolved = await ctx.request(
        "POST",
        f"{s.gateway.base_url}/v1/admin/attempts/{attempt_id}/resolve",
        key=s.admin_key,
        actor="admin",
        json_body=body,
    )
    ctx.expect(
        resolved.status_code in (200, 202),
        "the operator's resolution still works",
        f"status {resolved.status_code}: {resolved.text[:300]}",
    )
    job = await ctx.wait_job(
        s.gateway,
        s.key,
        job_id,
        lambda j: j.get("status") == "succeeded",
        10.0,
        "the job succeeds on the certified fallback",
    )
    ctx.expect(
        winner_of(job).get("provider") == SIM_ANTHROPIC, "the fallback's attempt won", brief(job)
    )


async def stored_completions(ctx: ScenarioContext, sim: Process, key: str) -> list[Any]:
    """Ask the simulator, as the reconciler would, what it stored under ``key``."""
    response = await ctx.http.get(
        f"{sim.base_url}/p/{SIM_OPENAI}/v1/chat/completions",
        params={"metadata[onejob_key]": key},
    )
    response.raise_for_status()
    data: list[Any] = response.json()["data"]
    return data


async def resolution(ctx: ScenarioContext, s: Stage, job_id: str) -> dict[str, Any]:
    """Return the detail of the job's ``attempt_resolved`` event (empty when none)."""
    response = await ctx.request(
        "GET", f"{s.gateway.base_url}/v1/jobs/{job_id}/events", key=s.key, record=False
    )
    events = listed(response, "events") if response.status_code == 200 else []
    details = [e.get("detail") or {} for e in events if e.get("kind") == "attempt_resolved"]
    return dict(details[0]) if details else {}


async def wait_finding(
    ctx: ScenarioContext, s: Stage, attempt_id: str, timeout: float
) -> dict[str, Any]:
    """Poll the admin list until it shows a reconciler finding for the attempt."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        response = await ctx.request(
            "GET",
            f"{s.gateway.base_url}/v1/admin/attempts?state=unknown",
            key=s.admin_key,
            actor="admin",
            record=False,
        )
        for attempt in listed(response, "attempts"):
            if attempt.get("id") == attempt_id and attempt.get("reconciler"):
                return dict(attempt["reconciler"])
        await asyncio.sleep(0.2)
    return {}
