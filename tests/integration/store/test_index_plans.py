"""Every statement of the hot paths reads its tables through the index meant for it, on
tables never analyzed: the plan a connection caches must not wait for statistics
autovacuum has not gathered yet.

The paths are ``bench.lib.hot_paths``'s (creation, replay, claim, decision, reads, the
owner's and the all-owners listings, the reaper's and the reconciler's scans), run on the
freshly migrated database of the test (PostgreSQL with autovacuum off: no table was ever
analyzed). Each statement they sent is planned as a connection caches it (its generic
plan), and two rules are checked: no hot table (jobs, attempts, job_events) is read whole,
and a statement that names a row by its id reads it by the primary key.
``python -m bench.volume`` records the same plans at 0, 1 M and 10 M jobs
(docs/benchmarks.md, at volume).

The paths in ``KNOWN`` break a rule on tables never analyzed (their plans at 1 M and
10 M jobs, analyzed, are the intended ones); the test fails when that list is wrong
either way, so a fix shortens it and a new wrong plan fails.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from bench.lib.hot_paths import HOT_TABLES, Traffic, plans, record_statements, whole_reads
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import open_store

pytestmark = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)

#: Paths whose plans break a rule on tables never analyzed. On such a table PostgreSQL
#: assumes 10 pages and no row counts: a hash join over the whole of a 10-page table, or
#: an index of the same estimated cost, wins. Each is the intended index at 1 M and 10 M
#: jobs (``bench.volume``), and a generic plan made on tables never analyzed is replanned
#: at the first ANALYZE, which autovacuum runs once 50 rows and 10 % changed
#: (docs/operations.md, volume): what is left is the first minute of a database with
#: autovacuum on.
KNOWN: dict[str, str] = {
    "claim": "hash-joins jobs read whole; its UPDATE finds the attempt by (state, lease)",
    "reaper: deadlines": "hash-joins jobs read whole",
    "listing": "the page's attempts (job_id IN ...) read whole",
    # Since migration 0010 the attempts' unique index is (job_id, number, owner_id): a
    # wider index, costed above a read of 10 pages. "job by id" left this list then: the
    # primary key (id, owner_id) answers id and owner.
    "admin listing": "the page's attempts (job_id IN ...) read whole, as the listing's",
    "admin listing, failed": "no index has status first: every job, sorted by id",
}


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[Any]:
    c = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        yield c
    finally:
        await c.close()


def by_id_not_by_key(sql: str, scans: list[str]) -> list[str]:
    """The hot tables a statement names a row of by id (``table.id = $n``) and reads
    through another index than their primary key."""
    named = set(re.findall(r"\b(\w+)\.id = \$\d", sql)) & set(HOT_TABLES)
    return [
        read
        for read in scans
        if read.split(" by ")[0] in named and read.split(" by ")[1] != f"pk_{read.split()[0]}"
    ]


async def test_hot_statements_take_their_index_on_tables_never_analyzed(
    database_url: str, conn: Any
) -> None:
    # Shortcuts off: every statement goes through SQLAlchemy, where it is recorded.
    store = await open_store(
        database_url, shortcuts=ShortcutsConfig.all_off(), database=DatabaseConfig()
    )
    try:
        statements = await record_statements(store, Traffic(owner="alice", small_owner="bob"))
    finally:
        await store.close()
    found = await plans(conn, statements)
    paths = {p["path"] for p in found.values()}
    # A replay sends the statements of a creation: they are recorded as creation's.
    assert {"creation", "claim", "decision", "admin listing", "reconciler scan"} <= paths
    wrong: dict[str, list[str]] = {}
    for sql, p in found.items():
        bad = whole_reads(p["scans"]) + by_id_not_by_key(sql, p["scans"])
        if bad:
            wrong.setdefault(p["path"], []).append(f"{bad}\n{sql}")
    shown = "\n\n".join(f"{path}: {' '.join(why)}" for path, why in sorted(wrong.items()))
    assert set(wrong) == set(KNOWN), shown
