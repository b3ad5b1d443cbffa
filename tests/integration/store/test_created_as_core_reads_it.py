"""What creation and a decision return is what a later read finds, on both databases.

Creation skips SQLAlchemy Core: on PostgreSQL one statement through asyncpg, on SQLite
the transaction's statements on the pooled connection with SQLAlchemy's own column
processors (``create``, ``finalize``). Every other path (reads, the reconciler, the
console) reads the rows through Core, so the two must agree on every column: timestamps
(microseconds zero or not), JSON with non-ASCII text and nesting, NULLs, the claim.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import threading
from typing import Any

import pytest
import sqlalchemy as sa

from gateway.domain.ports import Clock
from gateway.domain.records import AddAttemptOutcome, ClaimSpec, CreateOutcome, FinalizeOutcome
from gateway.domain.states import AttemptReason, AttemptState, JobStatus
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import SqlJobStore, open_store
from gateway.store.tables import job_events

INPUT = {"text": "imprimante en feu 🔥 — «urgent»", "nested": {"n": [1, 2.5, None, True]}}


class FixedClock(Clock):
    def __init__(self, at: dt.datetime) -> None:
        self.at = at

    def now(self) -> dt.datetime:
        return self.at


async def _events(store: SqlJobStore, job_id: str) -> list[tuple[str, str | None, Any]]:
    async with store.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(job_events.c.kind, job_events.c.attempt_id, job_events.c.detail)
            .where(job_events.c.job_id == job_id)
            .order_by(job_events.c.id)
        )
        return [tuple(r) for r in rows]


async def test_a_claimed_creation_reads_back_column_for_column(
    database_url: str, make_job: Any
) -> None:
    for at in (
        dt.datetime(2026, 12, 1, 20, 0, 0, tzinfo=dt.UTC),  # no microseconds
        dt.datetime(2026, 12, 1, 20, 0, 0, 123456, tzinfo=dt.UTC),
    ):
        store = await open_store(
            database_url,
            clock=FixedClock(at),
            shortcuts=ShortcutsConfig.from_env(),
            database=DatabaseConfig.from_env(),
        )
        try:
            claim = ClaimSpec(worker_id="w-1", lease_ttl=30.0, deadline_s=12.5)
            made = await store.create_or_get(
                make_job(key=f"k-{at.microsecond}", input=INPUT), claim
            )
            assert made.outcome is CreateOutcome.CREATED and made.claimed is not None
            read = await store.get_job(made.job.id)
            assert read == made.job
            assert made.claimed.job == dataclasses.replace(read, attempts=())
            [attempt] = read.attempts
            assert attempt.created_at == at and attempt.started_at == at
            assert attempt.lease_expires_at == at + dt.timedelta(seconds=30)
            assert attempt.deadline_at == at + dt.timedelta(seconds=12.5)
            assert read.input == INPUT and read.created_at == at
            assert await _events(store, read.id) == [
                ("job_created", None, {"contract": "ticket-triage@1", "provider": "sim-openai"}),
                (
                    "attempt_created",
                    attempt.id,
                    {"number": 1, "provider": "sim-openai", "reason": "initial"},
                ),
                (
                    "attempt_running",
                    attempt.id,
                    {"worker": "w-1", "read_version": 1, "in_process": True},
                ),
            ]
        finally:
            await store.close()


async def test_a_replay_and_a_conflict_return_the_job_as_read(
    store: SqlJobStore, make_job: Any
) -> None:
    made = await store.create_or_get(make_job(input=INPUT))
    again = await store.create_or_get(make_job(input=INPUT))
    clash = await store.create_or_get(make_job(input={"text": "other"}))
    read = await store.get_job(made.job.id)
    assert again.outcome is CreateOutcome.REPLAYED and again.job == read == made.job
    assert clash.outcome is CreateOutcome.CONFLICT and clash.job == read
    kinds = [(k, a, d) for k, a, d in await _events(store, read.id)][-2:]
    assert kinds == [
        ("replayed", None, {}),
        ("conflict", None, {"fingerprint": make_job(input={"text": "other"}).fingerprint}),
    ]


async def test_a_decision_returns_the_job_as_read_and_its_events(
    store: SqlJobStore, make_job: Any
) -> None:
    """The winning CAS (SQLite: its statements sent bare) hands back the decided job a
    read finds, and writes the one ``attempt_succeeded`` event."""
    claim = ClaimSpec(worker_id="w-1", lease_ttl=30.0, deadline_s=10.0)
    made = await store.create_or_get(make_job(input=INPUT), claim)
    assert made.claimed is not None
    result = {"answer": "naïve ✓", "n": [1, {"x": None}]}
    won = await store.finalize(
        made.claimed.attempt.id, result, provider_request_id="req-1", reported_model="m-1"
    )
    assert won.outcome is FinalizeOutcome.WON
    read = await store.get_job(made.job.id)
    assert won.job == read
    assert read.status is JobStatus.SUCCEEDED and read.result == result and read.version == 2
    [attempt] = read.attempts
    assert attempt.state is AttemptState.SUCCEEDED
    assert (attempt.provider_request_id, attempt.reported_model) == ("req-1", "m-1")
    assert (await _events(store, read.id))[-1] == (
        "attempt_succeeded",
        attempt.id,
        {"version": 2, "provider": "sim-openai"},
    )
    again = await store.finalize(made.claimed.attempt.id, {"answer": "twice"})
    assert again.outcome is not FinalizeOutcome.WON
    assert (await store.get_job(read.id)) == read  # nothing moved


async def test_a_decision_with_an_unsent_hedge_cancels_it(
    store: SqlJobStore, make_job: Any
) -> None:
    claim = ClaimSpec(worker_id="w-1", lease_ttl=30.0, deadline_s=10.0)
    made = await store.create_or_get(make_job(), claim)
    assert made.claimed is not None
    hedge = await store.add_attempt(made.job.id, "b", AttemptReason.HEDGE, allow_running=True)
    assert hedge.outcome is AddAttemptOutcome.ADDED
    won = await store.finalize(made.claimed.attempt.id, {"answer": 1})
    assert won.outcome is FinalizeOutcome.WON
    read = await store.get_job(made.job.id)
    assert won.job == read
    assert [a.state for a in read.attempts] == [AttemptState.SUCCEEDED, AttemptState.CANCELLED]


async def test_sqlite_that_cannot_be_opened_is_unavailable(tmp_path: Any, make_job: Any) -> None:
    """A file that cannot be opened fails the bare checkout with SQLAlchemy's error, which
    the HTTP layer answers 503 (``failures.database_unavailable``), as through Core."""
    from gateway.store.failures import database_unavailable

    before = set(threading.enumerate())
    store = await open_store(
        f"sqlite+aiosqlite:///{tmp_path}/missing/dir/onejob.db",
        shortcuts=ShortcutsConfig.from_env(),
        database=DatabaseConfig.from_env(),
    )
    try:
        with pytest.raises(sa.exc.DBAPIError) as caught:
            await store.create_or_get(make_job())
        assert database_unavailable(caught.value)
    finally:
        await store.close()
    # On the plain path (ONEJOB_SHORTCUTS=off) aiosqlite opens each connection on a thread
    # of its own; when the open fails it stops that thread without waiting for it, and the
    # thread then settles a future on this test's loop. Were the loop closed first, the
    # thread would raise "Event loop is closed" into whichever test runs next (CI failed
    # on it once in three runs). Wait for every thread the store started to end.
    started = [t for t in threading.enumerate() if t not in before]
    for thread in started:
        await asyncio.to_thread(thread.join, 10)
    assert not [t for t in started if t.is_alive()], "the store left a thread running"
