"""Many jobs at once, for the capacity scenarios: clients that post, a settle that waits for
every job through the listing, the provider's executions counted from the call log, and the
gateway's view of its providers (``GET /v1/providers``)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from scenarios.context import ScenarioContext, listed
from scenarios.stage import Stage, job_id_of, post_job

SETTLED = frozenset({"succeeded", "failed", "cancelled", "unknown"})
PAGE = 100  # jobs per listing page (the most ``GET /v1/jobs`` gives)
POLL = 0.25  # seconds between two looks


@dataclasses.dataclass(frozen=True, slots=True)
class Posted:
    """One job a client created: its key, its id, when it was posted (scenario seconds)."""

    key: str
    job_id: str
    at: float
    status: int


async def post_many(
    ctx: ScenarioContext,
    s: Stage,
    prefix: str,
    seq: int,
    *,
    body: Callable[[int], dict[str, Any]] | None = None,
    record: bool = False,
) -> Posted:
    """Create job ``seq`` (key ``<prefix>-<seq>``); FAIL unless 201; return what was posted."""
    key = f"{prefix}-{seq}"
    at = ctx.now()
    make = body or (lambda n: ctx.job_body(s.contract, seed=n))
    created = await post_job(ctx, s.gateway, s.key, key, make(seq), record=record)
    if created.status_code != 201:  # one check for all of them is the caller's
        ctx.expect(False, f"job {key} is created", f"{created.status_code}: {created.text[:200]}")
    return Posted(key, job_id_of(created) or "", at, created.status_code)


async def all_jobs(ctx: ScenarioContext, s: Stage) -> dict[str, dict[str, Any]]:
    """Return every job of the stage's key, by id, through ``GET /v1/jobs`` pages."""
    jobs: dict[str, dict[str, Any]] = {}
    cursor: str | None = None
    while True:
        url = f"{s.gateway.base_url}/v1/jobs?limit={PAGE}"
        if cursor:
            url += f"&cursor={cursor}"
        response = await ctx.request("GET", url, key=s.key, record=False)
        for job in listed(response, "jobs"):
            jobs[str(job["id"])] = job
        cursor = response.json().get("next_cursor")
        if not cursor:
            return jobs


async def settle(
    ctx: ScenarioContext,
    s: Stage,
    ids: Iterable[str],
    timeout: float,
    seen: Callable[[dict[str, dict[str, Any]]], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Poll the listing until every job in ``ids`` is settled; return them by id (FAIL
    when time runs out). ``seen`` is given every look's jobs (to note waits as they come)."""
    wanted = set(ids)
    deadline = time.monotonic() + timeout
    while True:
        jobs = await all_jobs(ctx, s)
        if seen is not None:
            seen(jobs)
        open_ = [i for i in wanted if jobs.get(i, {}).get("status") not in SETTLED]
        if not open_:
            return {i: jobs[i] for i in wanted}
        if time.monotonic() > deadline:
            statuses = Counter(str(jobs.get(i, {}).get("status")) for i in open_)
            ctx.expect(
                False,
                f"every one of the {len(wanted)} jobs settles",
                f"not within {timeout:.0f} s; {len(open_)} still open: {dict(statuses)}",
            )
        await asyncio.sleep(POLL)


def winner(job: dict[str, Any]) -> dict[str, Any]:
    """Return the attempt that completed the job (empty when none)."""
    return next((a for a in job["attempts"] if a.get("id") == job.get("completed_by")), {})


def executions(calls: Iterable[dict[str, Any]]) -> tuple[Counter[str], Counter[str]]:
    """Count the calls a provider really ran and answered 200, per downstream key and per
    job (the key is ``<job id>/<attempt number>``)."""
    per_key: Counter[str] = Counter()
    per_job: Counter[str] = Counter()
    for call in calls:
        if call.get("status") == 200 and call.get("outcome") == "answered":
            key = str(call.get("idempotency_key") or "")
            per_key[key] += 1
            per_job[key.split("/", 1)[0]] += 1
    return per_key, per_job


async def providers(ctx: ScenarioContext, s: Stage) -> dict[str, dict[str, Any]]:
    """Return ``GET /v1/providers`` by provider name."""
    response = await ctx.request(
        "GET", f"{s.gateway.base_url}/v1/providers", key=s.key, record=False
    )
    return {str(p["name"]): p for p in listed(response, "providers")}


def share(part: float, whole: float) -> float:
    """Return ``part / whole`` (0 for nothing)."""
    return part / whole if whole else 0.0


def iso_to_unix(value: Any) -> float | None:
    """Turn an API timestamp (RFC 3339, ``Z``) into a unix time (None when absent)."""
    if not isinstance(value, str) or not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
