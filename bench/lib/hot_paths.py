"""The store's hot paths, timed one call at a time, and the plans of the statements they send.

``bench.volume`` times each path at each size of the database (0, 1 M, 10 M jobs) and
records the plan PostgreSQL would cache for every statement the paths sent;
``tests/integration/store/test_index_plans.py`` runs the same paths on an empty database
never analyzed and asserts that no plan reads a whole hot table. One list of paths, so the
statements the benchmark timed are the ones the test checks.

Statements are recorded from SQLAlchemy's cursor (``before_cursor_execute``), so the
store is opened with its shortcuts off for that: the bare-connection shortcut sends the
same SQL text on the driver connection, out of SQLAlchemy's sight.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from gateway.domain.fingerprint import fingerprint
from gateway.domain.records import NewJob
from gateway.domain.states import AttemptState, JobStatus
from gateway.store.store import SqlJobStore

CONTRACT = "ticket-triage@1"
PROVIDER = "sim-openai"
WORKER = "volume-worker"
LEASE_TTL = 300.0  # seconds: no lease taken here expires while the benchmark runs
#: The tables whose whole reading would grow with the jobs kept.
HOT_TABLES = ("jobs", "attempts", "job_events")
#: The reconciler's scan (``gateway.reconciler.SCAN_LIMIT``).
RECONCILER_SCAN = 1000
#: Age bounds of the unknown-attempts gauge (seconds, label), as the metrics ask.
UNKNOWN_AGES = ((60.0, "1m"), (3600.0, "1h"))


def ticket(n: int) -> dict[str, Any]:
    """A ticket like the contract's cases, numbered ``n``."""
    return {
        "ticket_id": f"SUP-{n}",
        "channel": "email",
        "customer": {"name": "Priya", "plan": "pro"},
        "subject": "Charged twice",
        "body": f"My card was charged twice for March; order {n}.",
    }


def new_job(owner: str, key: str, n: int) -> NewJob:
    """The job the service would hand the store for ``owner``'s ``key``."""
    data = ticket(n)
    return NewJob(
        owner_id=owner,
        idempotency_key=key,
        fingerprint=fingerprint(CONTRACT, data, None),
        contract=CONTRACT,
        provider=PROVIDER,
        requested_provider=None,
        input=data,
    )


RESULT = {
    "category": "billing",
    "priority": "high",
    "summary": "Billing ticket from Priya: Charged twice",
    "needs_human": True,
    "language": "en",
}


@dataclass
class Traffic:
    """What one round of the paths made, for the next path to use."""

    owner: str
    small_owner: str
    jobs: list[NewJob] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)
    claimed: list[str] = field(default_factory=list)


#: A path: one call against the store, given the round's traffic and the call's number.
Path = Callable[[SqlJobStore, Traffic, int], Awaitable[object]]


async def create(store: SqlJobStore, t: Traffic, n: int) -> object:
    job = new_job(t.owner, f"volume-{secrets.token_hex(8)}", n)
    t.jobs.append(job)
    result = await store.create_or_get(job)
    t.job_ids.append(result.job.id)
    return result


async def replay(store: SqlJobStore, t: Traffic, n: int) -> object:
    return await store.create_or_get(t.jobs[n % len(t.jobs)])


async def claim(store: SqlJobStore, t: Traffic, n: int) -> object:
    claimed = await store.claim_next_attempt(
        WORKER, lease_ttl=LEASE_TTL, deadline_s={}, default_deadline_s=LEASE_TTL
    )
    if claimed is not None:
        t.claimed.append(claimed.attempt.id)
    return claimed


async def decide(store: SqlJobStore, t: Traffic, n: int) -> object:
    if n >= len(t.claimed):
        return None
    return await store.finalize(t.claimed[n], RESULT)


async def read_job(store: SqlJobStore, t: Traffic, n: int) -> object:
    return await store.get_job(t.job_ids[n % len(t.job_ids)], t.owner)


async def audit_trail(store: SqlJobStore, t: Traffic, n: int) -> object:
    return await store.events(t.job_ids[n % len(t.job_ids)])


async def listing(store: SqlJobStore, t: Traffic, n: int) -> object:
    return await store.list_jobs(t.owner, status=None, limit=20, cursor=None)


async def listing_small(store: SqlJobStore, t: Traffic, n: int) -> object:
    return await store.list_jobs(t.small_owner, status=None, limit=20, cursor=None)


async def listing_failed(store: SqlJobStore, t: Traffic, n: int) -> object:
    return await store.list_jobs(t.owner, status=JobStatus.FAILED, limit=20, cursor=None)


async def listing_next_page(store: SqlJobStore, t: Traffic, n: int) -> object:
    _, cursor = await store.list_jobs(t.owner, status=None, limit=20, cursor=None)
    return await store.list_jobs(t.owner, status=None, limit=20, cursor=cursor)


async def admin_listing(store: SqlJobStore, t: Traffic, n: int) -> object:
    return await store.list_jobs(None, status=None, limit=20, cursor=None)


async def admin_listing_failed(store: SqlJobStore, t: Traffic, n: int) -> object:
    return await store.list_jobs(None, status=JobStatus.FAILED, limit=20, cursor=None)


async def reaper_leases(store: SqlJobStore, t: Traffic, n: int) -> object:
    return await store.reap_expired_leases()


async def reaper_deadlines(store: SqlJobStore, t: Traffic, n: int) -> object:
    return await store.expire_overdue()


async def queue_depth(store: SqlJobStore, t: Traffic, n: int) -> object:
    return await store.queue_depth()


async def reconciler_scan(store: SqlJobStore, t: Traffic, n: int) -> object:
    return await store.list_attempts(AttemptState.UNKNOWN, limit=RECONCILER_SCAN)


async def unknown_gauge(store: SqlJobStore, t: Traffic, n: int) -> object:
    return await store.unknown_by_provider_and_age(UNKNOWN_AGES, "older")


#: Every hot path, in the order they run (each uses what the ones before it made).
PATHS: dict[str, Path] = {
    "creation": create,
    "replay": replay,
    "claim": claim,
    "decision": decide,
    "job by id": read_job,
    "audit trail": audit_trail,
    "listing": listing,
    "listing, small owner": listing_small,
    "listing, failed": listing_failed,
    "listing, page 2": listing_next_page,
    "admin listing": admin_listing,
    "admin listing, failed": admin_listing_failed,
    "reaper: leases": reaper_leases,
    "reaper: deadlines": reaper_deadlines,
    "queue depth": queue_depth,
    "reconciler scan": reconciler_scan,
    "unknown gauge": unknown_gauge,
}


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


async def time_paths(store: SqlJobStore, traffic: Traffic, calls: int) -> dict[str, Any]:
    """Call each path ``calls`` times in a row; return p50, p99 and max per path (ms)."""
    out: dict[str, Any] = {}
    for name, path in PATHS.items():
        took: list[float] = []
        for n in range(calls):
            began = time.perf_counter()
            await path(store, traffic, n)
            took.append((time.perf_counter() - began) * 1000)
        out[name] = {
            "calls": calls,
            "p50_ms": round(percentile(took, 0.5), 3),
            "p99_ms": round(percentile(took, 0.99), 3),
            "max_ms": round(max(took), 3),
        }
    return out


@contextlib.contextmanager
def recorded(store: SqlJobStore) -> Iterator[dict[str, str]]:
    """Record every statement the store sends through SQLAlchemy: its text by path name
    (set ``recorded.path`` on the yielded dict's ``""`` key to name the path running)."""
    seen: dict[str, str] = {"": ""}

    def note(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        words = statement.lstrip().split(None, 1)
        if words and words[0].upper() in ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH"):
            seen.setdefault(statement, seen[""])

    engine = store.engine.sync_engine
    sa.event.listen(engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", note)


async def record_statements(store: SqlJobStore, traffic: Traffic) -> dict[str, str]:
    """Run each path twice; return every statement sent, with the path that sent it first."""
    with recorded(store) as seen:
        for name, path in PATHS.items():
            seen[""] = name
            for n in range(2):
                await path(store, traffic, n)
    seen.pop("")
    return seen


async def generic_plan(conn: Any, sql: str) -> Any:
    """Return the plan (EXPLAIN's JSON) a connection would cache for ``sql``: its generic
    plan, made without the parameters' values (``plan_cache_mode = force_generic_plan``)."""
    types = [
        f"{t.name[1:]}[]" if t.name.startswith("_") else t.name
        for t in (await conn.prepare(sql)).get_parameters()
    ]
    name = f"hot_{secrets.token_hex(4)}"
    await conn.execute("SET plan_cache_mode = force_generic_plan")
    await conn.execute(f"PREPARE {name} AS {sql}")
    try:
        nulls = ", ".join(f"NULL::{t}" for t in types)
        args = f"({nulls})" if types else ""
        return await conn.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE {name}{args}")
    finally:
        await conn.execute(f"DEALLOCATE {name}")
        await conn.execute("RESET plan_cache_mode")


def scans(plan: Any) -> list[str]:
    """The plan's reads of tables, each ``relation by index`` (or ``by Seq Scan``), sorted:
    an index read directly or through a bitmap is the same index."""
    found: list[str] = []

    def indexes(node: dict[str, Any]) -> list[str]:
        own = [node["Index Name"]] if "Index Name" in node else []
        return own + [i for child in node.get("Plans", []) for i in indexes(child)]

    def walk(node: dict[str, Any]) -> None:
        if "Relation Name" in node and node["Node Type"] != "ModifyTable":
            relation = node["Relation Name"]
            if node["Node Type"] == "Bitmap Heap Scan":
                found.extend(f"{relation} by {i}" for i in indexes(node))
                return
            found.append(f"{relation} by {node.get('Index Name', node['Node Type'])}")
        for child in node.get("Plans", []):
            walk(child)

    if isinstance(plan, str):
        plan = json.loads(plan)
    walk(plan[0]["Plan"])
    return sorted(found)


def whole_reads(reads: list[str]) -> list[str]:
    """The reads among ``reads`` that go through a whole hot table."""
    return [r for r in reads if r.endswith(" by Seq Scan") and r.split(" by ")[0] in HOT_TABLES]


async def plans(conn: Any, statements: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Each statement's generic plan reads, by statement, with the path that sent it."""
    return {
        sql: {"path": path, "scans": scans(await generic_plan(conn, sql))}
        for sql, path in statements.items()
    }
