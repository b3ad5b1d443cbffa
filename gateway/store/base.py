"""Transaction plumbing shared by the store's parts.

Every state change is one transaction (``_tx``). Its guard is a conditional UPDATE whose
rowcount is checked; a transaction that changes an attempt of a job first takes the job's
row lock (PostgreSQL ``FOR UPDATE``, or the CAS's own UPDATE of the job; on SQLite the
write lock serializes writers), so transitions of one job never interleave or deadlock.
Each change appends its audit event in the same transaction. Dialect differences stay in
the store's modules."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.domain.clock import Clock, IdFactory, SystemClock, UlidFactory
from gateway.domain.guards import blocking_attempt
from gateway.domain.jsontext import scrub
from gateway.domain.records import (
    AttemptRecord,
    JobRecord,
    TransitionOutcome,
    TransitionResult,
)
from gateway.domain.states import AttemptReason, AttemptState, JobStatus
from gateway.notify import ChangeHub
from gateway.settings import DatabaseConfig
from gateway.store import pg_round_trips as pg
from gateway.store.engine import track_backends
from gateway.store.failures import database_unavailable
from gateway.store.health import DatabaseHealth
from gateway.store.pg_connections import PostgresConnector, ReadinessProbe
from gateway.store.pg_creations import CreationBatcher
from gateway.store.pg_wakeups import Wakeups
from gateway.store.rows import (
    DECIDED,
    A,
    attempt_record,
    job_record,
    naive_utc,
)
from gateway.store.sqlite_round_trips import Codec
from gateway.store.statements import (
    ATTEMPT_ROW,
    ATTEMPT_ROWS,
    INSERT_EVENTS,
    derived_status,
    insert_events_statement,
)
from gateway.store.tables import attempts, jobs

log = logging.getLogger("onejob.store")


class StoreBase:
    """Engine, transactions and the helpers every part of the store shares."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        hub: ChangeHub | None = None,
        clock: Clock | None = None,
        ids: IdFactory | None = None,
        database: DatabaseConfig | None = None,
    ) -> None:
        self.engine = engine
        #: The database's deadlines (the engine was made with the same).
        self.database = database or DatabaseConfig()
        timeout = self.database.timeout
        self.hub = hub or ChangeHub()
        self.clock = clock or SystemClock()
        self.ids = ids or UlidFactory(self.clock)
        self._sqlite = engine.dialect.name == "sqlite"
        self._write_lock: contextlib.AbstractAsyncContextManager[Any] = (
            asyncio.Lock() if self._sqlite else contextlib.nullcontext()
        )
        #: SQLite: SQLAlchemy's own column processors, for the statements sent bare.
        self._sqlite_codec = Codec(engine.dialect) if self._sqlite else None
        #: PostgreSQL: the NOTIFYs for other processes, sent after each commit.
        self._wakeups = None if self._sqlite else Wakeups(engine, self.hub.own_backends)
        #: PostgreSQL: the connections kept out between statements sent alone.
        self._kept = None if self._sqlite else pg.KeptConnections(engine)
        #: PostgreSQL: creations that queue while one is on the wire go together.
        self._creations = (
            None if self._sqlite else CreationBatcher(engine, self._kept, timeout=timeout)
        )
        if not self._sqlite:
            track_backends(engine, self.hub.own_backends)
        #: PostgreSQL: the readiness probe's own connection (``ping``).
        self._probe = (
            None
            if self._sqlite
            else ReadinessProbe(
                PostgresConnector(engine.url.render_as_string(hide_password=False), self.database)
            )
        )
        #: Whether the database answers, as this process saw last (one log line a change).
        self.health = DatabaseHealth(self.ping)
        if self._wakeups is not None:
            self._wakeups.unavailable = self.unavailable
        #: Attempts this process claimed and surely never sent (attempt id -> worker id),
        #: to put back in the queue once the database answers (``release_unsent``).
        self._unsent: dict[str, str] = {}

    async def ping(self, timeout: float = 1.0) -> None:
        """Return once the database answered within ``timeout`` seconds; raise otherwise."""
        if self._probe is not None:
            await self._probe.ping(timeout)
        else:
            async with asyncio.timeout(timeout), self.engine.connect() as conn:
                await conn.execute(sa.text("SELECT 1"))
        self.health.answered()

    def unavailable(self, exc: BaseException, where: str) -> bool:
        """Say whether ``exc`` means the database is unavailable (not a bug); count it if so.

        The caller answers 503 or tries again later, and logs nothing itself: the outage
        is logged once, with its counts (``DatabaseHealth``).
        """
        if not database_unavailable(exc):
            return False
        self.health.failed(where, exc)
        return True

    def never_sent(self, attempt_id: str, worker_id: str) -> None:
        """Remember that ``worker_id`` claimed ``attempt_id`` and surely never sent it.

        The claim could not be used (the statement that made it got no answer, or the
        database failed before the call): ``release_unsent`` puts the attempt back in
        the queue once the database answers, so a call that never left does not end
        ``unknown`` for an operator to resolve.
        """
        self._unsent[attempt_id] = worker_id

    def _now(self) -> dt.datetime:
        return naive_utc(self.clock.now())

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[WriteTx]:
        """Run one write transaction; publish its wake-ups after it commits."""
        tx = WriteTx()
        # SQLite has one write lock per file: queue this process's writers on an asyncio
        # lock (FIFO, no polling) instead of letting each sleep in the driver's busy
        # handler. Other processes' writers are waited for in ``sqlite_inline``.
        async with self._write_lock, self.engine.begin() as conn:
            tx.conn = conn
            yield tx
        self._committed({job_id: tx.records.get(job_id) for job_id in tx.jobs}, tx.attempt_created)

    def _committed(self, jobs: dict[str, JobRecord | None], attempt_created: bool) -> None:
        """Publish a commit's changes: to this process's waiters and runners at once (with
        the job as committed, when known), and on PostgreSQL to the other processes'
        (``pg_wakeups``: NOTIFY after the commit, not inside it)."""
        for job_id, record in jobs.items():
            self.hub.publish_job(job_id, record)
        if attempt_created:
            self.hub.publish_attempt()
        if self._wakeups is not None and (jobs or attempt_created):
            self._wakeups.post(jobs, attempt=attempt_created)

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncConnection]:
        async with self.engine.connect() as conn:
            conn = await conn.execution_options(onejob_readonly=True)
            async with conn.begin():
                yield conn

    @asynccontextmanager
    async def _read_once(self) -> AsyncIterator[AsyncConnection]:
        """Run one single-statement read outside a transaction (no BEGIN, no COMMIT)."""
        # SQLite: our BEGIN listener skips the transaction (the driver is in autocommit
        # already); setting isolation_level there would leave the pooled connection reset
        # to the driver's implicit-BEGIN mode.
        options = {"onejob_autocommit": True} if self._sqlite else {"isolation_level": "AUTOCOMMIT"}
        async with self.engine.connect() as conn:
            yield await conn.execution_options(**options)

    async def _event(
        self,
        conn: AsyncConnection,
        job_id: str,
        kind: str,
        detail: dict[str, Any] | None = None,
        attempt_id: str | None = None,
    ) -> None:
        await conn.execute(
            INSERT_EVENTS,
            {
                "job_id": job_id,
                "attempt_id": attempt_id,
                "kind": kind,
                "detail": scrub(detail or {}),
                "at": self._now(),
            },
        )

    async def _events(
        self, conn: AsyncConnection, rows: Sequence[tuple[str, str, dict[str, Any], str | None]]
    ) -> None:
        """Append several audit events in one statement: ``(job_id, kind, detail, attempt)``."""
        at = self._now()
        params: dict[str, Any] = {}
        for n, (job_id, kind, detail, attempt_id) in enumerate(rows):
            params.update(
                {
                    f"job_id_{n}": job_id,
                    f"attempt_id_{n}": attempt_id,
                    f"kind_{n}": kind,
                    f"detail_{n}": scrub(detail),
                    f"at_{n}": at,
                }
            )
        await conn.execute(insert_events_statement(len(rows)), params)

    async def _lock_job(self, conn: AsyncConnection, job_id: str) -> Any:
        """Take the job's row lock (the per-job mutex) and return the row."""
        query = sa.select(jobs).where(jobs.c.id == job_id)
        if not self._sqlite:
            query = query.with_for_update()
        return (await conn.execute(query)).one_or_none()

    async def _refresh_status(self, conn: AsyncConnection, job_id: str) -> Any:
        """Recompute an undecided job's status from its attempts; return the row (None if
        the job is decided)."""
        return (
            await conn.execute(
                jobs.update()
                .where(jobs.c.id == job_id, jobs.c.status.not_in(DECIDED))
                .values(status=derived_status(), updated_at=self._now())
                .returning(*jobs.c)
            )
        ).one_or_none()

    async def _load(
        self, conn: AsyncConnection, job_id: str, owner_id: str | None = None
    ) -> JobRecord | None:
        query = sa.select(jobs).where(jobs.c.id == job_id)
        if owner_id is not None:
            query = query.where(jobs.c.owner_id == owner_id)
        row = (await conn.execute(query)).one_or_none()
        if row is None:
            return None
        return job_record(row, await self._attempt_rows(conn, job_id))

    async def _attempt_rows(self, conn: AsyncConnection, job_id: str) -> Sequence[Any]:
        return (await conn.execute(ATTEMPT_ROWS, {"job_id": job_id})).all()

    async def _attempt_row(self, conn: AsyncConnection, attempt_id: str) -> Any:
        return (await conn.execute(ATTEMPT_ROW, {"attempt_id": attempt_id})).one_or_none()

    async def _insert_attempt(
        self,
        conn: AsyncConnection,
        tx: WriteTx,
        job_id: str,
        number: int,
        provider: str,
        reason: AttemptReason,
    ) -> AttemptRecord:
        attempt_id = self.ids.new("att")
        row = (
            await conn.execute(
                attempts.insert()
                .values(
                    id=attempt_id,
                    job_id=job_id,
                    number=number,
                    provider=provider,
                    reason=reason.value,
                    state=A.STARTING.value,
                    downstream_key=f"{job_id}/{number}",
                    created_at=self._now(),
                )
                .returning(*attempts.c)
            )
        ).one()
        await self._event(
            conn,
            job_id,
            "attempt_created",
            {"number": number, "provider": provider, "reason": reason.value},
            attempt_id,
        )
        tx.attempt_created = True
        tx.jobs.add(job_id)
        return attempt_record(row)

    async def _move(
        self,
        conn: AsyncConnection,
        attempt_id: str,
        sources: Sequence[AttemptState],
        target: AttemptState,
        values: dict[str, Any],
        extra_where: Sequence[sa.ColumnElement[bool]] = (),
    ) -> Any:
        """Move an attempt from one of ``sources`` to ``target``; return the row or None."""
        return (
            await conn.execute(
                attempts.update()
                .where(
                    attempts.c.id == attempt_id,
                    attempts.c.state.in_([s.value for s in sources]),
                    *extra_where,
                )
                .values(state=target.value, **{k: scrub(v) for k, v in values.items()})
                .returning(*attempts.c)
            )
        ).one_or_none()

    @asynccontextmanager
    async def _attempt_tx(self, attempt_id: str) -> AsyncIterator[tuple[WriteTx, str] | None]:
        """Open a write transaction holding the attempt's job lock; None if no such attempt."""
        async with self._tx() as tx:
            job_id = (
                await tx.conn.execute(
                    sa.select(attempts.c.job_id).where(attempts.c.id == attempt_id)
                )
            ).scalar_one_or_none()
            if job_id is None:
                yield None
                return
            await self._lock_job(tx.conn, job_id)
            tx.jobs.add(job_id)
            yield tx, job_id

    async def _refused(
        self, conn: AsyncConnection, job_id: str, blocker: AttemptRecord, reason: AttemptReason
    ) -> None:
        """Record that R4 refused a new attempt, naming the attempt that blocks it."""
        await self._event(
            conn,
            job_id,
            "attempt_refused",
            {
                "why": "attempt in progress",
                "blocking": blocker.id,
                "blocking_state": blocker.state.value,
                "reason": reason.value,
            },
        )

    async def _add_failover(
        self, conn: AsyncConnection, tx: WriteTx, job_id: str, provider: str
    ) -> AttemptRecord | None:
        job = await self._load(conn, job_id)
        assert job is not None
        if job.status.decided:
            return None
        blocker = blocking_attempt(job.attempts, allow_running=False)
        if blocker is not None:
            await self._refused(conn, job_id, blocker, AttemptReason.FAILOVER)
            return None
        number = max(a.number for a in job.attempts) + 1
        return await self._insert_attempt(
            conn, tx, job_id, number, provider, AttemptReason.FAILOVER
        )

    async def _close_if_failed(
        self, conn: AsyncConnection, job_id: str, error: dict[str, Any]
    ) -> None:
        """Recompute the status; a job left with only failed attempts records the last error."""
        await self._refresh_status(conn, job_id)
        status = (
            await conn.execute(sa.select(jobs.c.status).where(jobs.c.id == job_id))
        ).scalar_one()
        if status == JobStatus.FAILED.value:
            await conn.execute(jobs.update().where(jobs.c.id == job_id).values(error=scrub(error)))
            await self._event(conn, job_id, "job_failed", error)

    async def _conflict(
        self, conn: AsyncConnection, job_id: str, attempt_id: str, why: str
    ) -> TransitionResult:
        job = await self._load(conn, job_id)
        attempt = next((a for a in job.attempts if a.id == attempt_id), None) if job else None
        return TransitionResult(TransitionOutcome.CONFLICT, job, attempt, detail=why)

    async def _done(self, conn: AsyncConnection, job_id: str, row: Any) -> TransitionResult:
        return TransitionResult(
            TransitionOutcome.DONE, await self._load(conn, job_id), attempt_record(row)
        )

    async def _cancel_unsent(self, conn: AsyncConnection, job_id: str, why: str) -> list[str]:
        """Cancel a decided job's attempts that were never sent (e.g. a queued hedge)."""
        unsent = list(
            (
                await conn.execute(
                    attempts.update()
                    .where(attempts.c.job_id == job_id, attempts.c.state == A.STARTING.value)
                    .values(
                        state=A.CANCELLED.value,
                        finished_at=self._now(),
                        error={"reason": f"job_{why}_before_send"},
                    )
                    .returning(attempts.c.id)
                )
            ).scalars()
        )
        for attempt_id in unsent:
            await self._event(conn, job_id, "attempt_cancelled", {"why": why}, attempt_id)
        return unsent


class Stale(Exception):
    """Raised inside a transaction to roll it back when a guard found the row moved."""


class WriteTx:
    """One write transaction and the wake-ups to publish after it commits."""

    conn: AsyncConnection

    def __init__(self) -> None:
        self.jobs: set[str] = set()
        #: Jobs as this transaction leaves them, handed to this process's waiters.
        self.records: dict[str, JobRecord] = {}
        self.attempt_created = False

    def decided(self, job: JobRecord | None) -> None:
        """Hand ``job`` (as committed) to the waiters woken after commit."""
        if job is not None:
            self.jobs.add(job.id)
            self.records[job.id] = job

    def changed(self, job_id: str) -> None:
        """Publish ``job_id`` after commit (its waiters re-read it)."""
        self.jobs.add(job_id)
