"""PostgreSQL: a process ignores its own NOTIFY echo, and still hears every other process.

The store publishes each change to this process's waiters after its commit, with the job
as committed. The same change comes back through LISTEN; taken as another process's, it
made a waiter re-read the job it had just been handed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.notify import ChangeHub, listen_postgres
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import SqlJobStore, open_store
from gateway.store.pg_connections import PostgresConnector

pytestmark = pytest.mark.postgres


class CountingHub(ChangeHub):
    """A hub that remembers every job change it was told of, and whether with a record."""

    def __init__(self) -> None:
        super().__init__()
        self.changes: list[tuple[str, bool]] = []

    def publish_job(self, job_id: str, record: Any = None) -> None:
        self.changes.append((job_id, record is not None))
        super().publish_job(job_id, record)


@contextlib.asynccontextmanager
async def process(url: str) -> AsyncIterator[tuple[SqlJobStore, CountingHub]]:
    """One gateway process's store and hub, with its LISTEN relay running."""
    hub = CountingHub()
    store = await open_store(
        url, hub=hub, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    stop = asyncio.Event()
    relay = asyncio.create_task(listen_postgres(PostgresConnector(url).connect, hub, stop))
    try:
        await asyncio.sleep(0.3)  # LISTEN is in place
        yield store, hub
    finally:
        stop.set()
        await asyncio.wait_for(relay, 10)
        await store.close()


async def _settle() -> None:
    await asyncio.sleep(0.5)  # notifications are delivered well within this on loopback


async def test_own_changes_are_published_once_with_the_record_and_others_are_relayed(
    database_url: str, make_job: Any
) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    async with process(database_url) as (a, hub_a), process(database_url) as (b, hub_b):
        created = await a.create_or_get(make_job(key="echo"))
        job_id = created.job.id
        await _settle()
        hub_a.changes.clear()
        hub_b.changes.clear()

        cancelled = await a.cancel(job_id)
        assert cancelled.job is not None and cancelled.job.status.value == "cancelled"
        await _settle()
        # Process A: its own commit's publish, with the record; no echo from LISTEN.
        assert hub_a.changes == [(job_id, True)]
        assert hub_a.own_backends, "the pool's backend PIDs are tracked"
        # Process B: A's change arrives through LISTEN, without a record (B re-reads).
        assert hub_b.changes == [(job_id, False)]

        # And the other way round: B's change reaches A.
        other = await b.create_or_get(make_job(key="echo-b"))
        await _settle()
        hub_a.changes.clear()
        await b.cancel(other.job.id)
        await _settle()
        assert hub_a.changes == [(other.job.id, False)]
