"""PostgreSQL: other processes are woken after a commit, by a NOTIFY of its own.

A ``pg_notify`` inside the writing transaction made its commit wait for every other
notifying commit of the cluster (``pg_wakeups`` says why). The store's transactions and
its creations now commit, then send their wake-ups; the winning decision in one statement
keeps its ``pg_notify``. What must hold: a process that is woken reads the committed
change, on every path that decides a job; an unclaimed attempt wakes runners elsewhere; a
wake-up that cannot be sent costs nothing but latency; wake-ups posted together go out in
one statement; a cut wake-up connection is replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.database_url import relay_url
from gateway.domain.records import ClaimSpec, FinalizeOutcome
from gateway.notify import ATTEMPTS_CHANNEL, JOBS_CHANNEL
from gateway.settings import DatabaseConfig
from gateway.store import SqlJobStore, pg_wakeups
from gateway.store.pg_connections import PostgresConnector

pytestmark = pytest.mark.postgres

CLAIM = ClaimSpec(worker_id="w1", lease_ttl=30.0, deadline_s=30.0)


@pytest.fixture
def pg_url(database_url: str) -> str:
    if not database_url.startswith("postgresql"):
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    return database_url


@contextlib.asynccontextmanager
async def listener(url: str) -> AsyncIterator[asyncio.Queue[tuple[str, str, str | None]]]:
    """Another process's LISTEN: each notification, with the job's status read at once
    on a connection of its own (None for an attempt wake-up). It listens where the relay
    would: past a transaction pooler, on ``[database] listen_url``."""
    config = DatabaseConfig.from_env()
    connector = PostgresConnector(relay_url(url, config.listen_url, config.pooler) or url)
    listen = await connector.connect()
    reader = await connector.connect()
    heard: asyncio.Queue[tuple[str, str, str | None]] = asyncio.Queue()
    reads: set[asyncio.Task[None]] = set()
    one_at_a_time = asyncio.Lock()

    async def read(channel: str, payload: str) -> None:
        status = None
        async with one_at_a_time:  # in arrival order, on the one reading connection
            if channel == JOBS_CHANNEL:
                status = await reader.fetchval("SELECT status FROM jobs WHERE id = $1", payload)
            heard.put_nowait((channel, payload, status))

    def on_note(_conn: object, _pid: int, channel: str, payload: str) -> None:
        task = asyncio.get_running_loop().create_task(read(channel, payload))
        reads.add(task)
        task.add_done_callback(reads.discard)

    await listen.add_listener(JOBS_CHANNEL, on_note)
    await listen.add_listener(ATTEMPTS_CHANNEL, on_note)
    try:
        yield heard
    finally:
        await listen.close()
        await reader.close()


async def next_note(
    heard: asyncio.Queue[tuple[str, str, str | None]],
) -> tuple[str, str, str | None]:
    return await asyncio.wait_for(heard.get(), 10)


async def test_a_decision_in_one_statement_wakes_others_once_committed(
    pg_url: str, store: SqlJobStore, make_job: Any
) -> None:
    async with listener(pg_url) as heard:
        created = await store.create_or_get(make_job(key="one-statement"), CLAIM)
        assert created.claimed is not None
        decided = await store.finalize(created.claimed.attempt.id, {"category": "billing"})
        assert decided.outcome is FinalizeOutcome.WON
        channel, payload, status = await next_note(heard)
        # The listener read the job the moment it was woken: the decision was visible.
        assert (channel, payload, status) == (JOBS_CHANNEL, created.job.id, "succeeded")


async def test_a_transaction_wakes_others_once_committed(
    pg_url: str, store: SqlJobStore, make_job: Any
) -> None:
    created = await store.create_or_get(make_job(key="in-a-transaction"), CLAIM)
    async with listener(pg_url) as heard:
        cancelled = await store.cancel(created.job.id)
        assert cancelled.job is not None
        assert await next_note(heard) == (JOBS_CHANNEL, created.job.id, "cancelled")


async def test_an_unclaimed_attempt_wakes_runners_elsewhere(
    pg_url: str, store: SqlJobStore, make_job: Any
) -> None:
    async with listener(pg_url) as heard:
        await store.create_or_get(make_job(key="unclaimed"))
        assert await next_note(heard) == (ATTEMPTS_CHANNEL, "", None)
        # A claimed first attempt runs here: nobody else is woken for it.
        await store.create_or_get(make_job(key="claimed"), CLAIM)
        await asyncio.sleep(0.3)
        assert heard.empty()


async def test_the_commit_comes_first_and_the_wake_up_after_it(
    pg_url: str, store: SqlJobStore, make_job: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hold the wake-up back: the decision is committed and visible without it."""
    release = asyncio.Event()
    send = pg_wakeups.Wakeups._send

    async def held(self: pg_wakeups.Wakeups, batch: list[tuple[str, str]]) -> None:
        await release.wait()
        await send(self, batch)

    monkeypatch.setattr(pg_wakeups.Wakeups, "_send", held)
    async with listener(pg_url) as heard:
        created = await store.create_or_get(make_job(key="held"), CLAIM)
        assert created.claimed is not None
        cancelled = await store.cancel(created.job.id)
        assert cancelled.job is not None
        other = await PostgresConnector(pg_url).connect()
        try:
            status = await other.fetchval("SELECT status FROM jobs WHERE id = $1", created.job.id)
        finally:
            await other.close()
        assert status == "cancelled"
        await asyncio.sleep(0.2)
        assert heard.empty()
        release.set()
        assert await next_note(heard) == (JOBS_CHANNEL, created.job.id, "cancelled")


async def test_a_wake_up_that_cannot_be_sent_is_dropped_and_the_change_stands(
    pg_url: str,
    store: SqlJobStore,
    make_job: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def unreachable(_engine: Any) -> Any:
        raise OSError("connection refused")

    monkeypatch.setattr(pg_wakeups, "pooled_connection", unreachable)
    async with listener(pg_url) as heard:
        created = await store.create_or_get(make_job(key="dropped"), CLAIM)
        assert created.claimed is not None
        cancelled = await store.cancel(created.job.id)
        assert cancelled.job is not None
        wakeups = store.db.wakeups
        assert wakeups is not None
        await wakeups.drain()
        assert (wakeups.sent, wakeups.dropped) == (0, 1)
        assert "wake-ups not sent" in caplog.text
        await asyncio.sleep(0.3)
        assert heard.empty()
        # What the others' polls read: the decision, committed.
        job = await store.get_job(created.job.id)
        assert job is not None and job.status.value == "cancelled"


async def test_wake_ups_posted_together_go_in_one_statement(
    pg_url: str, store: SqlJobStore
) -> None:
    async with listener(pg_url) as heard:
        wakeups = store.db.wakeups
        assert wakeups is not None
        statements = 0
        send = wakeups._send

        async def counted(batch: list[tuple[str, str]]) -> None:
            nonlocal statements
            statements += 1
            await send(batch)

        wakeups._send = counted  # type: ignore[method-assign]
        # Three commits finishing in one turn of the loop, one of them twice.
        wakeups.post(["job_a"])
        wakeups.post(["job_b", "job_a"], attempt=True)
        wakeups.post(["job_c"])
        await wakeups.drain()
        notes = [await next_note(heard) for _ in range(4)]
        assert statements == 1 and wakeups.sent == 4
        assert [(c, p) for c, p, _ in notes] == [
            (ATTEMPTS_CHANNEL, ""),
            (JOBS_CHANNEL, "job_a"),
            (JOBS_CHANNEL, "job_b"),
            (JOBS_CHANNEL, "job_c"),
        ]


async def test_a_lost_wake_up_connection_is_replaced_and_its_backend_forgotten(
    pg_url: str,
    store: SqlJobStore,
) -> None:
    async with listener(pg_url) as heard:
        wakeups = store.db.wakeups
        assert wakeups is not None
        wakeups.post(["job_before"])
        assert (await next_note(heard))[1] == "job_before"
        first = wakeups._conn.get_server_pid()
        assert first in store.hub.own_backends  # its echo is dropped like the pool's
        admin = await PostgresConnector(pg_url).connect()
        try:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", first)
        finally:
            await admin.close()
        await asyncio.sleep(0.2)
        # The first send after the cut may be lost (a hint: the poll covers it); the
        # connection is replaced, and the wake-ups after it arrive.
        wakeups.post(["job_lost_maybe"])
        await wakeups.drain()
        wakeups.post(["job_after"])
        await wakeups.drain()
        payloads = []
        while "job_after" not in payloads:
            payloads.append((await next_note(heard))[1])
        assert wakeups.sent + wakeups.dropped == 3
        assert first not in store.hub.own_backends
        assert wakeups._conn.get_server_pid() in store.hub.own_backends
