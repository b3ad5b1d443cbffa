"""The JobStore on SQLAlchemy Core: one implementation for SQLite and PostgreSQL.

Every state change is one transaction. Its guard is a conditional UPDATE whose rowcount is
checked; a transaction that changes an attempt first takes the job's row lock (PostgreSQL
``FOR UPDATE``; on SQLite ``BEGIN IMMEDIATE`` already serializes writers), so transitions of
one job never interleave and never deadlock. Each change appends its audit event in the
same transaction. Dialect differences stay in this module.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import datetime as dt
import hashlib
import logging
import secrets
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.domain.clock import Clock, IdFactory, SystemClock, UlidFactory
from gateway.domain.guards import blocking_attempt
from gateway.domain.jsontext import scrub
from gateway.domain.records import (
    AddAttemptOutcome,
    AddAttemptResult,
    AttemptRecord,
    ClaimedAttempt,
    ClaimSpec,
    CreateOutcome,
    CreateResult,
    EventRecord,
    FinalizeOutcome,
    FinalizeResult,
    JobRecord,
    NewJob,
    Principal,
    TransitionOutcome,
    TransitionResult,
)
from gateway.domain.states import AttemptReason, AttemptState, JobStatus
from gateway.notify import ATTEMPTS_CHANNEL, JOBS_CHANNEL, ChangeHub
from gateway.store.engine import make_engine
from gateway.store.tables import api_keys, attempts, job_events, jobs

log = logging.getLogger("onejob.store")

A = AttemptState
DECIDED = (JobStatus.SUCCEEDED.value, JobStatus.CANCELLED.value)
MAX_LIST_LIMIT = 100


def _naive(value: dt.datetime) -> dt.datetime:
    return value.astimezone(dt.UTC).replace(tzinfo=None)


def _aware(value: dt.datetime | None) -> dt.datetime | None:
    return None if value is None else value.replace(tzinfo=dt.UTC)


def _attempt(row: Any) -> AttemptRecord:
    return AttemptRecord(
        id=row.id,
        job_id=row.job_id,
        number=row.number,
        provider=row.provider,
        reason=AttemptReason(row.reason),
        state=AttemptState(row.state),
        read_version=row.read_version,
        lease_owner=row.lease_owner,
        lease_expires_at=_aware(row.lease_expires_at),
        deadline_at=_aware(row.deadline_at),
        downstream_key=row.downstream_key,
        provider_request_id=row.provider_request_id,
        error=row.error,
        created_at=_aware(row.created_at),  # type: ignore[arg-type]
        started_at=_aware(row.started_at),
        finished_at=_aware(row.finished_at),
    )


def _job(row: Any, attempt_rows: Sequence[Any] = ()) -> JobRecord:
    return JobRecord(
        id=row.id,
        owner_id=row.owner_id,
        idempotency_key=row.idempotency_key,
        fingerprint=row.fingerprint,
        contract=row.contract,
        provider=row.provider,
        requested_provider=row.requested_provider,
        input=row.input,
        status=JobStatus(row.status),
        version=row.version,
        completed_by=row.completed_by,
        result=row.result,
        error=row.error,
        created_at=_aware(row.created_at),  # type: ignore[arg-type]
        updated_at=_aware(row.updated_at),  # type: ignore[arg-type]
        attempts=tuple(_attempt(a) for a in attempt_rows),
    )


def _derived_status() -> sa.ColumnElement[str]:
    """Return SQL that recomputes a job's status from its attempts (R3)."""

    def has(state: AttemptState) -> sa.Exists:
        return (
            sa.select(attempts.c.id)
            .where(attempts.c.job_id == jobs.c.id, attempts.c.state == state.value)
            .exists()
        )

    return sa.case(
        (has(A.UNKNOWN), JobStatus.UNKNOWN.value),
        (has(A.RUNNING), JobStatus.RUNNING.value),
        (has(A.STARTING), JobStatus.QUEUED.value),
        (jobs.c.completed_by.is_not(None), JobStatus.SUCCEEDED.value),
        else_=JobStatus.FAILED.value,
    )


def hash_key(secret: str) -> str:
    """Return the sha256 hex under which an API key is stored."""
    return hashlib.sha256(secret.encode()).hexdigest()


class SqlJobStore:
    """Durable jobs and attempts on SQLite or PostgreSQL."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        hub: ChangeHub | None = None,
        clock: Clock | None = None,
        ids: IdFactory | None = None,
    ) -> None:
        self.engine = engine
        self.hub = hub or ChangeHub()
        self.clock = clock or SystemClock()
        self.ids = ids or UlidFactory()
        self._sqlite = engine.dialect.name == "sqlite"
        self._write_lock: contextlib.AbstractAsyncContextManager[Any] = (
            asyncio.Lock() if self._sqlite else contextlib.nullcontext()
        )
        self._insert: Callable[..., Any] = sqlite.insert if self._sqlite else postgresql.insert

    # -- plumbing ------------------------------------------------------------------------

    def _now(self) -> dt.datetime:
        return _naive(self.clock.now())

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[_Tx]:
        """Run one write transaction; publish its wake-ups after it commits."""
        tx = _Tx()
        # SQLite has one write lock per file: queue this process's writers on an asyncio
        # lock (FIFO, no polling) instead of letting each sleep in the driver's busy
        # handler. Other processes still wait through ``busy_timeout``.
        async with self._write_lock, self.engine.begin() as conn:
            tx.conn = conn
            yield tx
            if not self._sqlite:
                notes = [sa.func.pg_notify(JOBS_CHANNEL, job_id) for job_id in tx.jobs]
                if tx.attempt_created:
                    notes.append(sa.func.pg_notify(ATTEMPTS_CHANNEL, ""))
                if notes:  # one round trip for all of them
                    await conn.execute(sa.select(*notes))
        for job_id in tx.jobs:
            self.hub.publish_job(job_id)
        if tx.attempt_created:
            self.hub.publish_attempt()

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncConnection]:
        async with self.engine.connect() as conn:
            conn = await conn.execution_options(onejob_readonly=True)
            async with conn.begin():
                yield conn

    async def _event(
        self,
        conn: AsyncConnection,
        job_id: str,
        kind: str,
        detail: dict[str, Any] | None = None,
        attempt_id: str | None = None,
    ) -> None:
        await conn.execute(
            job_events.insert().values(
                job_id=job_id,
                attempt_id=attempt_id,
                kind=kind,
                detail=scrub(detail or {}),
                at=self._now(),
            )
        )

    async def _events(
        self, conn: AsyncConnection, rows: Sequence[tuple[str, str, dict[str, Any], str | None]]
    ) -> None:
        """Append several audit events in one statement: ``(job_id, kind, detail, attempt)``."""
        at = self._now()
        await conn.execute(
            job_events.insert(),
            [
                {"job_id": j, "attempt_id": a, "kind": k, "detail": scrub(d), "at": at}
                for j, k, d, a in rows
            ],
        )

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
                .values(status=_derived_status(), updated_at=self._now())
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
        return _job(row, await self._attempt_rows(conn, job_id))

    async def _attempt_rows(self, conn: AsyncConnection, job_id: str) -> Sequence[Any]:
        return (
            await conn.execute(
                sa.select(attempts).where(attempts.c.job_id == job_id).order_by(attempts.c.number)
            )
        ).all()

    async def _attempt_row(self, conn: AsyncConnection, attempt_id: str) -> Any:
        return (
            await conn.execute(sa.select(attempts).where(attempts.c.id == attempt_id))
        ).one_or_none()

    async def _insert_attempt(
        self,
        conn: AsyncConnection,
        tx: _Tx,
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
        return _attempt(row)

    # -- creation -------------------------------------------------------------------------

    async def create_or_get(self, new: NewJob, claim: ClaimSpec | None = None) -> CreateResult:
        """Insert the job, its first attempt and events; on a key clash replay or conflict.

        ``INSERT ... ON CONFLICT (owner_id, idempotency_key) DO NOTHING``: the UNIQUE
        constraint decides, with no read before the insert and no aborted transaction.
        With ``claim``, a new job's first attempt is inserted already claimed (``running``,
        leased to ``claim.worker_id``), so the creating process can run it at once.
        """
        now = self._now()
        job_id = self.ids.new("job")
        async with self._tx() as tx:
            conn = tx.conn
            inserted = (
                await conn.execute(
                    self._insert(jobs)
                    .values(
                        id=job_id,
                        owner_id=new.owner_id,
                        idempotency_key=new.idempotency_key,
                        fingerprint=new.fingerprint,
                        contract=new.contract,
                        provider=new.provider,
                        requested_provider=new.requested_provider,
                        input=new.input,
                        status=(JobStatus.RUNNING if claim else JobStatus.QUEUED).value,
                        version=1,
                        created_at=now,
                        updated_at=now,
                    )
                    .on_conflict_do_nothing(index_elements=["owner_id", "idempotency_key"])
                    .returning(*jobs.c)
                )
            ).one_or_none()
            if inserted is not None:
                first = await self._insert_first_attempt(conn, tx, new, job_id, now, claim)
                job = dataclasses.replace(_job(inserted), attempts=(first,))
                claimed = ClaimedAttempt(first, _job(inserted)) if claim is not None else None
                return CreateResult(CreateOutcome.CREATED, job, claimed)

            row = (
                await conn.execute(
                    sa.select(jobs).where(
                        jobs.c.owner_id == new.owner_id,
                        jobs.c.idempotency_key == new.idempotency_key,
                    )
                )
            ).one()
            existing = _job(row, await self._attempt_rows(conn, row.id))
            if existing.fingerprint == new.fingerprint:
                await self._event(conn, existing.id, "replayed", {})
                return CreateResult(CreateOutcome.REPLAYED, existing)
            await self._event(conn, existing.id, "conflict", {"fingerprint": new.fingerprint})
            return CreateResult(CreateOutcome.CONFLICT, existing)

    async def _insert_first_attempt(
        self,
        conn: AsyncConnection,
        tx: _Tx,
        new: NewJob,
        job_id: str,
        now: dt.datetime,
        claim: ClaimSpec | None,
    ) -> AttemptRecord:
        """Insert attempt 1 (claimed when asked) and the creation events, in one go each."""
        attempt_id = self.ids.new("att")
        values: dict[str, Any] = {
            "id": attempt_id,
            "job_id": job_id,
            "number": 1,
            "provider": new.provider,
            "reason": AttemptReason.INITIAL.value,
            "state": A.STARTING.value,
            "downstream_key": f"{job_id}/1",
            "created_at": now,
        }
        created = {"number": 1, "provider": new.provider, "reason": AttemptReason.INITIAL.value}
        events: list[tuple[str, str, dict[str, Any], str | None]] = [
            (job_id, "job_created", {"contract": new.contract, "provider": new.provider}, None),
            (job_id, "attempt_created", created, attempt_id),
        ]
        if claim is not None:
            values.update(
                state=A.RUNNING.value,
                read_version=1,
                lease_owner=claim.worker_id,
                lease_expires_at=now + dt.timedelta(seconds=claim.lease_ttl),
                deadline_at=now + dt.timedelta(seconds=claim.deadline_s),
                started_at=now,
            )
            running = {"worker": claim.worker_id, "read_version": 1, "in_process": True}
            events.append((job_id, "attempt_running", running, attempt_id))
        else:
            # Only an unclaimed attempt needs a runner woken, here or in another process.
            tx.attempt_created = True
        row = (await conn.execute(attempts.insert().values(**values).returning(*attempts.c))).one()
        await self._events(conn, events)
        return _attempt(row)

    # -- reads ----------------------------------------------------------------------------

    async def get_job(self, job_id: str, owner_id: str | None = None) -> JobRecord | None:
        """Load a job with its attempts (``owner_id`` None: any owner)."""
        async with self._read() as conn:
            return await self._load(conn, job_id, owner_id)

    async def list_jobs(
        self, owner_id: str, *, status: JobStatus | None, limit: int, cursor: str | None
    ) -> tuple[list[JobRecord], str | None]:
        """List an owner's jobs newest first (ids are time-ordered ULIDs)."""
        limit = max(1, min(limit, MAX_LIST_LIMIT))
        query = sa.select(jobs).where(jobs.c.owner_id == owner_id)
        if status is not None:
            query = query.where(jobs.c.status == status.value)
        if cursor:
            query = query.where(jobs.c.id < decode_cursor(cursor))
        query = query.order_by(jobs.c.id.desc()).limit(limit + 1)
        async with self._read() as conn:
            rows = (await conn.execute(query)).all()
            page = rows[:limit]
            ids = [r.id for r in page]
            attempt_rows = (
                (
                    await conn.execute(
                        sa.select(attempts)
                        .where(attempts.c.job_id.in_(ids))
                        .order_by(attempts.c.job_id, attempts.c.number)
                    )
                ).all()
                if ids
                else []
            )
        by_job: dict[str, list[Any]] = {}
        for a in attempt_rows:
            by_job.setdefault(a.job_id, []).append(a)
        result = [_job(r, by_job.get(r.id, [])) for r in page]
        next_cursor = encode_cursor(page[-1].id) if len(rows) > limit else None
        return result, next_cursor

    async def get_attempt(self, attempt_id: str) -> AttemptRecord | None:
        """Load one attempt by id (any owner)."""
        async with self._read() as conn:
            row = await self._attempt_row(conn, attempt_id)
        return None if row is None else _attempt(row)

    async def list_attempts(
        self, state: AttemptState | None, *, limit: int = 100
    ) -> list[AttemptRecord]:
        """List attempts in a state, all owners, oldest first."""
        query = sa.select(attempts).order_by(attempts.c.created_at, attempts.c.id)
        if state is not None:
            query = query.where(attempts.c.state == state.value)
        async with self._read() as conn:
            rows = (await conn.execute(query.limit(max(1, min(limit, 1000))))).all()
        return [_attempt(r) for r in rows]

    async def count_attempts(self, state: AttemptState) -> int:
        """Count attempts in ``state`` (for the metrics gauge)."""
        async with self._read() as conn:
            return int(
                (
                    await conn.execute(
                        sa.select(sa.func.count()).where(attempts.c.state == state.value)
                    )
                ).scalar_one()
            )

    async def events(self, job_id: str) -> list[EventRecord]:
        """Return a job's audit trail, oldest first."""
        async with self._read() as conn:
            rows = (
                await conn.execute(
                    sa.select(job_events)
                    .where(job_events.c.job_id == job_id)
                    .order_by(job_events.c.id)
                )
            ).all()
        return [
            EventRecord(
                id=r.id,
                job_id=r.job_id,
                attempt_id=r.attempt_id,
                kind=r.kind,
                detail=r.detail,
                at=_aware(r.at),  # type: ignore[arg-type]
            )
            for r in rows
        ]

    async def record_event(
        self, job_id: str, kind: str, detail: dict[str, Any], attempt_id: str | None = None
    ) -> None:
        """Append an audit event on its own (e.g. a refused request)."""
        async with self._tx() as tx:
            await self._event(tx.conn, job_id, kind, detail, attempt_id)

    # -- attempts -------------------------------------------------------------------------

    async def add_attempt(
        self,
        job_id: str,
        provider: str,
        reason: AttemptReason,
        *,
        owner_id: str | None = None,
        allow_running: bool = False,
    ) -> AddAttemptResult:
        """Add an attempt if R4 allows; a refusal is recorded as an event."""
        async with self._tx() as tx:
            conn = tx.conn
            row = await self._lock_job(conn, job_id)
            if row is None or (owner_id is not None and row.owner_id != owner_id):
                return AddAttemptResult(AddAttemptOutcome.NOT_FOUND)
            job = await self._load(conn, job_id)
            assert job is not None
            if job.status.decided:
                await self._event(
                    conn,
                    job_id,
                    "attempt_refused",
                    {"why": f"job {job.status.value}", "reason": reason.value},
                )
                return AddAttemptResult(AddAttemptOutcome.CLOSED, job=job)
            blocker = blocking_attempt(job.attempts, allow_running=allow_running)
            if blocker is not None:
                await self._refused(conn, job_id, blocker, reason)
                return AddAttemptResult(AddAttemptOutcome.BLOCKED, blocking=blocker, job=job)
            if job.status is JobStatus.FAILED:
                # Reopening a failed job is a decision: it changes the version.
                await conn.execute(
                    jobs.update()
                    .where(jobs.c.id == job_id, jobs.c.version == job.version)
                    .values(version=jobs.c.version + 1, error=None)
                )
                await self._event(conn, job_id, "job_reopened", {"version": job.version + 1})
            number = max((a.number for a in job.attempts), default=0) + 1
            attempt = await self._insert_attempt(conn, tx, job_id, number, provider, reason)
            await self._refresh_status(conn, job_id)
            job = await self._load(conn, job_id)
            return AddAttemptResult(AddAttemptOutcome.ADDED, attempt=attempt, job=job)

    async def claim_next_attempt(
        self,
        worker_id: str,
        *,
        lease_ttl: float,
        deadline_s: dict[str, float],
        default_deadline_s: float,
    ) -> ClaimedAttempt | None:
        """Claim the oldest ``starting`` attempt: ``running``, leased, with a deadline."""
        try:
            return await self._claim(worker_id, lease_ttl, deadline_s, default_deadline_s)
        except _Stale:
            return None

    async def _claim(
        self,
        worker_id: str,
        lease_ttl: float,
        deadline_s: dict[str, float],
        default_deadline_s: float,
    ) -> ClaimedAttempt | None:
        async with self._tx() as tx:
            conn = tx.conn
            # Lock the attempt and its job together and skip either if someone holds it, so
            # a claim never waits behind (or deadlocks with) a cancel or a finalize.
            pick = (
                sa.select(attempts.c.id, attempts.c.job_id, attempts.c.provider)
                .join(jobs, jobs.c.id == attempts.c.job_id)
                .where(attempts.c.state == A.STARTING.value, jobs.c.status.not_in(DECIDED))
                .order_by(attempts.c.created_at, attempts.c.id)
                .limit(1)
            )
            if not self._sqlite:
                pick = pick.with_for_update(skip_locked=True, of=[attempts, jobs])
            candidate = (await conn.execute(pick)).one_or_none()
            if candidate is None:
                return None
            now = self._now()
            deadline = now + dt.timedelta(
                seconds=deadline_s.get(candidate.provider, default_deadline_s)
            )
            version = sa.select(jobs.c.version).where(jobs.c.id == attempts.c.job_id)
            row = (
                await conn.execute(
                    attempts.update()
                    .where(attempts.c.id == candidate.id, attempts.c.state == A.STARTING.value)
                    .values(
                        state=A.RUNNING.value,
                        read_version=version.scalar_subquery(),
                        lease_owner=worker_id,
                        lease_expires_at=now + dt.timedelta(seconds=lease_ttl),
                        deadline_at=deadline,
                        started_at=now,
                    )
                    .returning(*attempts.c)
                )
            ).one_or_none()
            if row is None:
                return None
            await self._event(
                conn,
                row.job_id,
                "attempt_running",
                {"worker": worker_id, "read_version": row.read_version},
                row.id,
            )
            job_row = await self._refresh_status(conn, row.job_id)
            tx.jobs.add(row.job_id)
            if job_row is None:  # decided meanwhile (SQLite has no row lock to stop it)
                raise _Stale
            return ClaimedAttempt(attempt=_attempt(row), job=_job(job_row))

    async def renew_lease(self, attempt_id: str, worker_id: str, *, lease_ttl: float) -> bool:
        """Extend the lease of a running attempt this worker holds."""
        async with self._tx() as tx:
            result = await tx.conn.execute(
                attempts.update()
                .where(
                    attempts.c.id == attempt_id,
                    attempts.c.lease_owner == worker_id,
                    attempts.c.state == A.RUNNING.value,
                )
                .values(lease_expires_at=self._now() + dt.timedelta(seconds=lease_ttl))
            )
            return result.rowcount == 1

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
    async def _attempt_tx(self, attempt_id: str) -> AsyncIterator[tuple[_Tx, str] | None]:
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

    async def mark_unknown(
        self,
        attempt_id: str,
        error: dict[str, Any],
        *,
        expected: AttemptState = AttemptState.RUNNING,
    ) -> TransitionResult:
        """Move an attempt (and its job) to ``unknown``: its outcome is not known."""
        async with self._attempt_tx(attempt_id) as found:
            if found is None:
                return TransitionResult(TransitionOutcome.NOT_FOUND)
            tx, job_id = found
            conn = tx.conn
            row = await self._move(conn, attempt_id, [expected], A.UNKNOWN, {"error": error})
            if row is None:
                return await self._conflict(conn, job_id, attempt_id, "not in expected state")
            await self._event(conn, job_id, "attempt_unknown", error, attempt_id)
            await self._refresh_status(conn, job_id)
            return await self._done(conn, job_id, row)

    async def fail_attempt(
        self, attempt_id: str, error: dict[str, Any], *, next_provider: str | None = None
    ) -> TransitionResult:
        """Record a definite failure; add a ``failover`` attempt on ``next_provider`` if given."""
        async with self._attempt_tx(attempt_id) as found:
            if found is None:
                return TransitionResult(TransitionOutcome.NOT_FOUND)
            tx, job_id = found
            conn = tx.conn
            row = await self._move(
                conn,
                attempt_id,
                [A.STARTING, A.RUNNING],
                A.FAILED,
                {"error": error, "finished_at": self._now()},
            )
            if row is None:
                return await self._conflict(conn, job_id, attempt_id, "not starting or running")
            await self._event(conn, job_id, "attempt_failed", error, attempt_id)
            added = None
            if next_provider is not None:
                added = await self._add_failover(conn, tx, job_id, next_provider)
            await self._close_if_failed(conn, job_id, error)
            result = await self._done(conn, job_id, row)
            return TransitionResult(result.outcome, result.job, result.attempt, added=added)

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
        self, conn: AsyncConnection, tx: _Tx, job_id: str, provider: str
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
            TransitionOutcome.DONE, await self._load(conn, job_id), _attempt(row)
        )

    # -- decisions ------------------------------------------------------------------------

    async def _cas(
        self, conn: AsyncConnection, job_id: str, read_version: int, attempt_id: str, result: Any
    ) -> Any:
        """The compare-and-swap of R5; the job row when this attempt's result became the job's."""
        won = await conn.execute(
            jobs.update()
            .where(
                jobs.c.id == job_id,
                jobs.c.version == read_version,
                jobs.c.completed_by.is_(None),
            )
            .values(
                status=JobStatus.SUCCEEDED.value,
                result=result,
                error=None,
                completed_by=attempt_id,
                version=jobs.c.version + 1,
                updated_at=self._now(),
            )
            .returning(*jobs.c)
        )
        return won.one_or_none()

    async def _lose(
        self,
        conn: AsyncConnection,
        job_id: str,
        attempt_id: str,
        sources: Sequence[AttemptState],
    ) -> FinalizeResult:
        """Mark the attempt ``lost``, drop its payload, log and record the race."""
        row = await self._move(conn, attempt_id, sources, A.LOST, {"finished_at": self._now()})
        if row is None:
            return FinalizeResult(FinalizeOutcome.STALE, attempt_id)
        job_row = (
            await conn.execute(
                sa.select(jobs.c.completed_by, jobs.c.status, jobs.c.version).where(
                    jobs.c.id == job_id
                )
            )
        ).one()
        detail = {
            "winner": job_row.completed_by,
            "job_status": job_row.status,
            "read_version": row.read_version,
            "job_version": job_row.version,
        }
        await self._event(conn, job_id, "race_lost", detail, attempt_id)
        log.warning(
            "attempt %s lost the race for job %s to %s; its result is dropped",
            attempt_id,
            job_id,
            job_row.completed_by or f"a {job_row.status} decision",
            extra={"job_id": job_id, "attempt_id": attempt_id, "winner": job_row.completed_by},
        )
        return FinalizeResult(
            FinalizeOutcome.LOST,
            attempt_id,
            winner=job_row.completed_by,
            job_status=JobStatus(job_row.status),
            job=await self._load(conn, job_id),
        )

    async def finalize(
        self, attempt_id: str, result: Any, *, provider_request_id: str | None = None
    ) -> FinalizeResult:
        """Compare-and-swap the job's result (R5); the loser is ``lost`` and its payload dropped."""
        try:
            return await self._finalize(attempt_id, result, provider_request_id)
        except _Stale:
            return FinalizeResult(FinalizeOutcome.STALE, attempt_id)

    async def _finalize(
        self, attempt_id: str, result: Any, provider_request_id: str | None
    ) -> FinalizeResult:
        async with self._tx() as tx:
            conn = tx.conn
            current = await self._attempt_row(conn, attempt_id)
            if current is None or current.state != A.RUNNING.value:
                return FinalizeResult(FinalizeOutcome.STALE, attempt_id)
            job_id = current.job_id
            tx.jobs.add(job_id)
            job_row = await self._cas(conn, job_id, current.read_version, attempt_id, result)
            if job_row is None:
                return await self._lose(conn, job_id, attempt_id, [A.RUNNING])
            row = await self._move(
                conn,
                attempt_id,
                [A.RUNNING],
                A.SUCCEEDED,
                {"finished_at": self._now(), "provider_request_id": provider_request_id},
            )
            if row is None:
                # Reaped to `unknown` between our read and the CAS: undo the whole decision.
                raise _Stale
            await self._cancel_unsent(conn, job_id, "decided")
            await self._event(
                conn,
                job_id,
                "attempt_succeeded",
                {"version": current.read_version + 1, "provider": current.provider},
                attempt_id,
            )
            return FinalizeResult(
                FinalizeOutcome.WON,
                attempt_id,
                winner=attempt_id,
                job_status=JobStatus.SUCCEEDED,
                job=_job(job_row, await self._attempt_rows(conn, job_id)),
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

    async def cancel(self, job_id: str, owner_id: str | None = None) -> TransitionResult:
        """Cancel through CAS: unsent attempts are cancelled, in-flight ones will lose."""
        async with self._tx() as tx:
            conn = tx.conn
            where = [jobs.c.id == job_id]
            if owner_id is not None:
                where.append(jobs.c.owner_id == owner_id)
            moved = await conn.execute(
                jobs.update()
                .where(*where, jobs.c.status.not_in(DECIDED), jobs.c.completed_by.is_(None))
                .values(
                    status=JobStatus.CANCELLED.value,
                    version=jobs.c.version + 1,
                    updated_at=self._now(),
                )
            )
            job = await self._load(conn, job_id, owner_id)
            if job is None:
                return TransitionResult(TransitionOutcome.NOT_FOUND)
            if moved.rowcount != 1:
                await self._event(conn, job_id, "cancel_refused", {"job_status": job.status.value})
                return TransitionResult(
                    TransitionOutcome.CONFLICT, job, detail=f"job is {job.status.value}"
                )
            unsent = await self._cancel_unsent(conn, job_id, "cancelled")
            await self._event(
                conn,
                job_id,
                "job_cancelled",
                {"version": job.version, "unsent_attempts_cancelled": unsent},
            )
            tx.jobs.add(job_id)
            return TransitionResult(TransitionOutcome.DONE, await self._load(conn, job_id))

    async def resolve(
        self,
        attempt_id: str,
        outcome: AttemptState,
        *,
        result: Any = None,
        note: str = "",
        next_provider: str | None = None,
    ) -> TransitionResult:
        """Resolve an ``unknown`` attempt out of band (``succeeded`` goes through R5).

        ``next_provider`` (with outcome ``failed``) adds the failover attempt in the same
        transaction, so resolving unblocks the job and the next try at once.
        """
        if outcome not in (A.FAILED, A.CANCELLED, A.SUCCEEDED):
            raise ValueError(f"cannot resolve to {outcome.value}")
        async with self._attempt_tx(attempt_id) as found:
            if found is None:
                return TransitionResult(TransitionOutcome.NOT_FOUND)
            tx, job_id = found
            conn = tx.conn
            current = await self._attempt_row(conn, attempt_id)
            if current.state != A.UNKNOWN.value:
                return await self._conflict(
                    conn, job_id, attempt_id, f"attempt is {current.state}, not unknown"
                )
            detail = {"outcome": outcome.value, "note": note}
            if outcome is A.SUCCEEDED:
                if await self._cas(conn, job_id, current.read_version, attempt_id, result) is None:
                    await self._lose(conn, job_id, attempt_id, [A.UNKNOWN])
                    await self._event(
                        conn, job_id, "attempt_resolved", {**detail, "won": False}, attempt_id
                    )
                    row = await self._attempt_row(conn, attempt_id)
                    return await self._done(conn, job_id, row)
                row = await self._move(
                    conn, attempt_id, [A.UNKNOWN], A.SUCCEEDED, {"finished_at": self._now()}
                )
                await self._cancel_unsent(conn, job_id, "decided")
                await self._event(
                    conn, job_id, "attempt_resolved", {**detail, "won": True}, attempt_id
                )
                return await self._done(conn, job_id, row)
            error = {"reason": f"resolved_{outcome.value}", "note": note, "previous": current.error}
            row = await self._move(
                conn,
                attempt_id,
                [A.UNKNOWN],
                outcome,
                {"error": error, "finished_at": self._now()},
            )
            await self._event(conn, job_id, "attempt_resolved", detail, attempt_id)
            added = None
            if outcome is A.FAILED and next_provider is not None:
                added = await self._add_failover(conn, tx, job_id, next_provider)
            await self._close_if_failed(conn, job_id, error)
            result_ = await self._done(conn, job_id, row)
            return TransitionResult(result_.outcome, result_.job, result_.attempt, added=added)

    async def reap_expired_leases(self) -> list[AttemptRecord]:
        """Turn running attempts whose lease expired into ``unknown`` (``lease_expired``)."""
        now = self._now()
        async with self._read() as conn:
            expired = (
                await conn.execute(
                    sa.select(attempts.c.id, attempts.c.job_id).where(
                        attempts.c.state == A.RUNNING.value,
                        attempts.c.lease_expires_at < now,
                    )
                )
            ).all()
        reaped: list[AttemptRecord] = []
        for attempt_id, job_id in expired:
            async with self._tx() as tx:
                conn = tx.conn
                await self._lock_job(conn, job_id)
                row = await self._move(
                    conn,
                    attempt_id,
                    [A.RUNNING],
                    A.UNKNOWN,
                    {"error": {"outcome": "unknown", "reason": "lease_expired"}},
                    extra_where=[attempts.c.lease_expires_at < now],
                )
                if row is None:
                    continue
                await self._event(
                    conn,
                    job_id,
                    "attempt_unknown",
                    {"reason": "lease_expired", "lease_owner": row.lease_owner},
                    attempt_id,
                )
                await self._refresh_status(conn, job_id)
                tx.jobs.add(job_id)
                log.warning(
                    "lease of attempt %s (job %s) expired; outcome unknown",
                    attempt_id,
                    job_id,
                    extra={"job_id": job_id, "attempt_id": attempt_id},
                )
                reaped.append(_attempt(row))
        return reaped

    # -- API keys -------------------------------------------------------------------------

    async def create_api_key(self, owner_id: str, scopes: frozenset[str]) -> tuple[str, str]:
        """Create a key; return ``(key_id, secret)``. Only the secret's sha256 is stored."""
        key_id = self.ids.new("key")
        secret = "oj_" + secrets.token_urlsafe(32)
        async with self._tx() as tx:
            await tx.conn.execute(
                api_keys.insert().values(
                    id=key_id,
                    owner_id=owner_id,
                    key_hash=hash_key(secret),
                    scopes=" ".join(sorted(scopes)),
                    created_at=self._now(),
                )
            )
        return key_id, secret

    async def authenticate(self, secret: str) -> Principal | None:
        """Return the principal of an unrevoked key, or None."""
        async with self._read() as conn:
            row = (
                await conn.execute(
                    sa.select(api_keys.c.id, api_keys.c.owner_id, api_keys.c.scopes).where(
                        api_keys.c.key_hash == hash_key(secret),
                        api_keys.c.revoked_at.is_(None),
                    )
                )
            ).one_or_none()
        if row is None:
            return None
        return Principal(key_id=row.id, owner_id=row.owner_id, scopes=frozenset(row.scopes.split()))

    async def revoke_api_key(self, key_id: str) -> bool:
        """Revoke a key; say whether it was active."""
        async with self._tx() as tx:
            moved = await tx.conn.execute(
                api_keys.update()
                .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
                .values(revoked_at=self._now())
            )
            return moved.rowcount == 1

    async def ping(self) -> None:
        """Raise if the database cannot be reached."""
        async with self.engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))

    async def close(self) -> None:
        """Dispose of the engine."""
        await self.engine.dispose()


class _Stale(Exception):
    """Raised inside a transaction to roll it back when a guard found the row moved."""


class _Tx:
    """One write transaction and the wake-ups to publish after it commits."""

    conn: AsyncConnection

    def __init__(self) -> None:
        self.jobs: set[str] = set()
        self.attempt_created = False


def encode_cursor(job_id: str) -> str:
    """Make an opaque paging cursor."""
    return base64.urlsafe_b64encode(job_id.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    """Read a paging cursor; raise ValueError when it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError("invalid cursor") from exc
    if not raw.startswith("job_") or not raw.isprintable() or len(raw) > 40:
        raise ValueError("invalid cursor")
    return raw


async def open_store(
    database_url: str,
    *,
    hub: ChangeHub | None = None,
    clock: Clock | None = None,
    ids: IdFactory | None = None,
) -> SqlJobStore:
    """Create the engine and the store (the caller runs migrations first)."""
    return SqlJobStore(make_engine(database_url), hub=hub, clock=clock, ids=ids)
