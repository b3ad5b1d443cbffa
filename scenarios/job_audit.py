"""What the gateways and the provider say about every job after a run of database faults.

Read only through the API (the owner's listing, ``/readyz``, ``/metrics``) and the
simulator's call log, plus one count on the final primary: every job a client was given
is there, one per key, settled or ``unknown``; no downstream key was called twice; an
``unknown`` attempt was sent; each gateway's LISTEN relay is connected again.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any
from urllib.parse import urlencode

from scenarios.context import ScenarioContext, listed
from scenarios.harness import Process
from scenarios.pgautoctl import fetch
from scenarios.pgcluster import PgAutoFailoverCluster
from scenarios.retrying_clients import RetryingClients

SETTLE_TIMEOUT = 90.0  # seconds every job has to settle once the load stops
READY_TIMEOUT = 15.0  # seconds a gateway's LISTEN relay has to be connected at the end
PAGE = 100  # jobs per listing page (the API's most)
MAX_PAGES = 1000  # pages read at most (100 000 jobs)
RECONNECTS = "onejob_listen_reconnects_total"  # the relay's reconnections, in /metrics


async def all_jobs(ctx: ScenarioContext, gateway: Process, key: str) -> list[dict[str, Any]]:
    """Read every job of the key's owner through one gateway, page by page."""
    jobs: list[dict[str, Any]] = []
    cursor = ""
    for _ in range(MAX_PAGES):
        query = urlencode({"limit": PAGE, "cursor": cursor} if cursor else {"limit": PAGE})
        response = await ctx.request(
            "GET", f"{gateway.base_url}/v1/jobs?{query}", key=key, record=False
        )
        if response.status_code != 200:  # one check for the whole listing, not per page
            ctx.expect(False, f"{gateway.name} lists the jobs", response.text[:200])
        jobs += listed(response, "jobs")
        cursor = response.json().get("next_cursor") or ""
        if not cursor:
            break
    return jobs


async def wait_settled(ctx: ScenarioContext, gateway: Process, key: str) -> float:
    """Wait (bounded) until no job is queued or running; return the seconds it took."""
    began = time.monotonic()
    while time.monotonic() - began < SETTLE_TIMEOUT:
        busy = 0
        for status in ("queued", "running"):
            url = f"{gateway.base_url}/v1/jobs?status={status}&limit=1"
            response = await ctx.request("GET", url, key=key, record=False)
            busy += len(listed(response, "jobs")) if response.status_code == 200 else 1
        if not busy:
            break
        await asyncio.sleep(0.5)
    return time.monotonic() - began


async def check_jobs(
    ctx: ScenarioContext,
    cluster: PgAutoFailoverCluster,
    gateways: list[Process],
    key: str,
    clients: RetryingClients,
    sim: Process,
    watched: list[tuple[str, str]],
) -> None:
    """Check every acknowledged job on the final primary, and what the provider was asked
    (``unknown`` jobs join ``watched``, for the timeline)."""
    acknowledged = clients.acknowledged()
    given = {job_id for ids in acknowledged.values() for job_id in ids}
    settling = await wait_settled(ctx, gateways[0], key)
    primary = await cluster.primary()
    listings = [await all_jobs(ctx, g, key) for g in gateways]
    jobs = {j["id"]: j for j in listings[0]}
    port = next(s.port for s in await cluster.states() if s.name == primary)
    rows = await fetch(port, cluster.dbname, "SELECT count(*) AS n FROM jobs")
    statuses = Counter(j["status"] for j in jobs.values())
    calls = Counter(str(c.get("idempotency_key")) for c in await ctx.sim_calls(sim))
    unknown = [
        f"{j['id']}/{a['number']}"
        for j in jobs.values()
        for a in j["attempts"]
        if a["state"] == "unknown"
    ]
    unsent = [k for k in unknown if k not in calls]
    watched += [(k.split("/")[0], "unknown") for k in (unsent or unknown)[:2]]
    ctx.note(
        f"{len(jobs)} jobs ({len(given)} acknowledged to a client), settled "
        f"{settling:.1f} s after the load: {dict(statuses)}; {len(unknown)} unknown "
        f"attempt(s), {len(unsent)} of them never sent; {sum(calls.values())} provider "
        f"calls for {len(calls)} downstream keys; final primary {primary}"
    )

    two = {k: sorted(ids) for k, ids in acknowledged.items() if len(ids) > 1}
    ctx.expect(
        not two, "every key was given one job id, however often it was retried", str(two)[:300]
    )
    for gateway, listing in zip(gateways, listings, strict=True):
        lost = given - {j["id"] for j in listing}
        ctx.expect(
            not lost,
            f"every acknowledged job is found through {gateway.name} on the final primary",
            f"{len(lost)} of {len(given)} missing: {sorted(lost)[:5]}",
        )
    ctx.expect(
        rows[0]["n"] == len(jobs),
        f"the final primary {primary} holds the jobs the gateways list",
        f"{rows[0]['n']} rows, {len(jobs)} listed",
    )
    per_key = Counter(j["idempotency_key"] for j in jobs.values())
    ctx.expect(max(per_key.values()) == 1, "one job per key", str(per_key.most_common(3)))
    twice = [k for k, n in calls.items() if n > 1]
    ctx.expect(
        not twice, "no downstream Idempotency-Key reached the provider twice", str(twice[:5])
    )
    doubles = [
        j["id"] for j in jobs.values() if sum(a["state"] == "succeeded" for a in j["attempts"]) > 1
    ]
    ctx.expect(not doubles, "no job has two succeeded attempts", str(doubles[:5]))
    ctx.expect(
        set(statuses) <= {"succeeded", "unknown"},
        f"every job settled, succeeded or unknown, within {SETTLE_TIMEOUT:.0f} s",
        str(dict(statuses)),
    )
    ctx.expect(
        not unsent,
        "every unknown attempt was sent (its downstream key was called)",
        "; ".join([await told(ctx, gateways[0], key, k) for k in unsent[:3]]),
    )


async def told(ctx: ScenarioContext, gateway: Process, key: str, downstream: str) -> str:
    """Return an attempt's downstream key and its job's audit trail, in one line."""
    job_id = downstream.split("/")[0]
    url = f"{gateway.base_url}/v1/jobs/{job_id}/events"
    response = await ctx.request("GET", url, key=key, record=False)
    events = listed(response, "events") if response.status_code == 200 else []
    return f"{downstream} never called: " + ", ".join(
        f"{e.get('kind')} at {str(e.get('at'))[11:23]}" for e in events
    )


async def check_ready(ctx: ScenarioContext, gateways: list[Process]) -> None:
    """Check that each gateway is ready and its LISTEN relay is connected again."""
    for gateway in gateways:
        deadline = time.monotonic() + READY_TIMEOUT
        body: dict[str, Any] = {}
        while time.monotonic() < deadline:
            response = await ctx.request("GET", f"{gateway.base_url}/readyz", record=False)
            body = response.json() if response.status_code == 200 else {}
            if body.get("listen") == "connected":
                break
            await asyncio.sleep(0.2)
        metrics = await ctx.request("GET", f"{gateway.base_url}/metrics", record=False)
        reconnects = next(
            (
                float(line.split()[-1])
                for line in metrics.text.splitlines()
                if line.startswith(f"{RECONNECTS} ")
            ),
            0.0,
        )
        ctx.expect(
            body.get("listen") == "connected" and reconnects >= 1,
            f"{gateway.name} is ready, its LISTEN relay reconnected to the new primary",
            f"/readyz {body}, {RECONNECTS} {reconnects:.0f}",
        )
        ctx.note(f"{gateway.name}: LISTEN relay reconnected {reconnects:.0f} times")
