"""Every key lookup takes the unique index, whatever PostgreSQL's statistics say.

A replay looks its job up by ``(owner_id, idempotency_key)``. Two more indexes lead with
``owner_id``; on tables never analyzed they cost the same as the unique one, and the plan
a connection caches (its generic plan, made while the tables were small) took one of them:
every replay read every job of its owner (112 replays/s right after 45,000 creations).
Migration 0004 leaves the unique index the only one that matches. Here each statement
that looks a key up is planned the way a connection caches it (``force_generic_plan``)
on empty tables never analyzed, on a full table never analyzed, and once analyzed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from gateway.store import create, creation_batches

pytestmark = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)

STATEMENTS = {
    "CREATE": create.CREATE,
    "CREATE_BY_KEY": create.CREATE_BY_KEY,
    "CREATE_BY_KEY_BATCH": creation_batches.CREATE_BY_KEY_BATCH,
    "REPLAY": create.REPLAY,
}
OWNER_INDEXES = ("ix_jobs_owner_id_id", "ix_jobs_owner_id_status_id")


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[Any]:
    c = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await c.execute("SET plan_cache_mode = force_generic_plan")
        yield c
    finally:
        await c.close()


async def generic_plan(conn: Any, name: str, sql: str) -> str:
    """Return the plan a connection would cache for ``sql`` (parameters all NULL)."""
    types = [
        f"{t.name[1:]}[]" if t.name.startswith("_") else t.name
        for t in (await conn.prepare(sql)).get_parameters()
    ]
    await conn.execute(f"PREPARE p_{name.lower()} AS {sql}")
    try:
        nulls = ", ".join(f"NULL::{t}" for t in types)
        rows = await conn.fetch(f"EXPLAIN EXECUTE p_{name.lower()}({nulls})")
        return "\n".join(r[0] for r in rows)
    finally:
        await conn.execute(f"DEALLOCATE p_{name.lower()}")


async def assert_lookups_take_the_unique_index(conn: Any) -> None:
    for name, sql in STATEMENTS.items():
        plan = await generic_plan(conn, name, sql)
        assert not any(index in plan for index in OWNER_INDEXES), f"{name}:\n{plan}"
        assert "uq_jobs_owner_id_idempotency_key" in plan or "Seq Scan on jobs" not in plan, (
            f"{name}:\n{plan}"
        )


async def test_key_lookups_take_the_unique_index_on_tables_never_analyzed(conn: Any) -> None:
    await assert_lookups_take_the_unique_index(conn)


async def test_key_lookups_take_the_unique_index_on_a_full_table_never_analyzed(
    conn: Any,
) -> None:
    await conn.execute(
        "INSERT INTO jobs SELECT 'job_' || g, 'alice', 'k' || g, 'f', 'c', 'p', NULL,"
        " '{}'::jsonb, 'succeeded', 1, NULL, NULL, NULL, now(), now()"
        " FROM generate_series(1, 20000) AS g"
    )
    await assert_lookups_take_the_unique_index(conn)
    await conn.execute("ANALYZE jobs")
    await assert_lookups_take_the_unique_index(conn)


async def test_the_listing_still_takes_its_index(conn: Any) -> None:
    await conn.execute(
        "INSERT INTO jobs SELECT 'job_' || g, 'alice', 'k' || g, 'f', 'c', 'p', NULL,"
        " '{}'::jsonb, 'succeeded', 1, NULL, NULL, NULL, now(), now()"
        " FROM generate_series(1, 20000) AS g"
    )
    await conn.execute("ANALYZE jobs")
    plan = await generic_plan(
        conn,
        "listing",
        'SELECT id FROM jobs WHERE owner_id COLLATE "C" = $1::varchar ORDER BY id DESC LIMIT 21',
    )
    assert "ix_jobs_owner_id_id" in plan, plan
