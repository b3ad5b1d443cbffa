"""One write transaction and what every state change does inside it.

Every state change is one transaction (``Database.write``). Its guard is a conditional
UPDATE whose rowcount is checked (``move``); a transaction that changes an attempt of a
job first takes the job's row lock (PostgreSQL ``FOR UPDATE``, or the compare-and-swap's
own UPDATE of the job; on SQLite the write lock serializes writers), so transitions of one
job never interleave or deadlock. Each change appends its audit event in the same
transaction (``event``), and the job's status is recomputed from its attempts
(``refresh_status``). What the transaction changed is published after it commits.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.domain.guards import blocking_attempt
from gateway.domain.jsontext import scrub
from gateway.domain.ports import IdFactory
from gateway.domain.records import AttemptRecord, JobRecord, TransitionOutcome, TransitionResult
from gateway.domain.states import AttemptReason, AttemptState, JobStatus
from gateway.store.events import INSERT_EVENTS, insert_events_statement
from gateway.store.rows import DECIDED, UNSENT, A, attempt_record, job_record
from gateway.store.tables import attempts, jobs

#: Every attempt of a job, oldest first (built once: a reused statement keeps its cache key).
#: By owner and job, as every statement of a job's data is (docs/scaling.md).
ATTEMPT_ROWS = (
    sa.select(attempts)
    .where(
        attempts.c.owner_id == sa.bindparam("owner_id"),
        attempts.c.job_id == sa.bindparam("job_id"),
    )
    .order_by(attempts.c.number)
)
ATTEMPT_ROW = sa.select(attempts).where(attempts.c.id == sa.bindparam("attempt_id"))
_MINE = attempts.alias("mine")


def by_attempt_id(attempt_id: str) -> list[sa.ColumnElement[bool]]:
    """The condition for one attempt given its id alone: its owner read by the same id in
    the statement, so that the primary key ``(id, owner_id)`` is matched whole. With
    ``id`` alone it is not unique to the planner, and ``state = 'running'`` beside it
    took ``(state, lease_expires_at)`` instead: every running attempt, and the dead ones
    not vacuumed yet, read at each decision."""
    owner = sa.select(_MINE.c.owner_id).where(_MINE.c.id == attempt_id).scalar_subquery()
    return [attempts.c.id == attempt_id, attempts.c.owner_id == owner]


class Stale(Exception):
    """Raised inside a transaction to roll it back when a guard found the row moved."""


class Dialect(Protocol):
    """What a transaction asks of its database (``gateway.store.database.Database``)."""

    ids: IdFactory

    def now(self) -> dt.datetime:
        """Return the store's clock as a stored time (naive UTC)."""
        ...

    def for_update(self, query: sa.Select[Any]) -> sa.Select[Any]:
        """Lock the rows ``query`` reads until the transaction ends (where rows lock)."""
        ...


def derived_status() -> sa.ColumnElement[str]:
    """Return SQL that recomputes a job's status from its attempts (R3)."""

    def has(state: AttemptState) -> sa.Exists:
        return (
            sa.select(attempts.c.id)
            .where(
                attempts.c.owner_id == jobs.c.owner_id,
                attempts.c.job_id == jobs.c.id,
                attempts.c.state == state.value,
            )
            .exists()
        )

    return sa.case(
        (has(A.UNKNOWN), JobStatus.UNKNOWN.value),
        (has(A.RUNNING), JobStatus.RUNNING.value),
        (has(A.STARTING), JobStatus.QUEUED.value),
        (has(A.WAITING), JobStatus.QUEUED.value),
        (jobs.c.completed_by.is_not(None), JobStatus.SUCCEEDED.value),
        else_=JobStatus.FAILED.value,
    )


class WriteTx:
    """One write transaction: its connection, and the changes to publish after it."""

    def __init__(self, conn: AsyncConnection, db: Dialect) -> None:
        self.conn = conn
        self.db = db
        self.jobs: set[str] = set()
        #: Jobs as this transaction leaves them, handed to this process's waiters.
        self.records: dict[str, JobRecord] = {}
        self.attempt_created = False
        #: Each job's owner, as read in this transaction: the events and attempts it
        #: writes carry it (the tables are keyed by owner, docs/scaling.md).
        self.owners: dict[str, str] = {}

    def _saw(self, row: Any) -> Any:
        """Remember the owner of the job (``id``) or attempt (``job_id``) ``row``."""
        if row is not None:
            self.owners[getattr(row, "job_id", None) or row.id] = row.owner_id
        return row

    async def owned(self, job_id: str) -> list[sa.ColumnElement[bool]]:
        """The condition for ``job_id``'s row, by its owner (read first if not known)."""
        return [jobs.c.owner_id == await self.owner_of(job_id), jobs.c.id == job_id]

    async def attempts_of(self, job_id: str) -> list[sa.ColumnElement[bool]]:
        """The condition for ``job_id``'s attempts, by its owner."""
        return [attempts.c.owner_id == await self.owner_of(job_id), attempts.c.job_id == job_id]

    async def owner_of(self, job_id: str) -> str:
        """The owner of ``job_id``: known from this transaction's reads, or read now."""
        owner = self.owners.get(job_id)
        if owner is None:
            query = sa.select(jobs.c.owner_id).where(jobs.c.id == job_id)
            owner = self.owners[job_id] = (await self.conn.execute(query)).scalar_one()
        return owner

    def decided(self, job: JobRecord | None) -> None:
        """Hand ``job`` (as committed) to the waiters woken after commit."""
        if job is not None:
            self.jobs.add(job.id)
            self.records[job.id] = job

    def changed(self, job_id: str) -> None:
        """Publish ``job_id`` after commit (its waiters re-read it)."""
        self.jobs.add(job_id)

    # -- reads inside the transaction -----------------------------------------------------

    def _job(self, job_id: str) -> list[sa.ColumnElement[bool]]:
        """The condition for ``job_id``'s row, by its owner too when this transaction knows it."""
        owner = self.owners.get(job_id)
        return [jobs.c.id == job_id] + ([jobs.c.owner_id == owner] if owner is not None else [])

    async def lock_job(self, job_id: str) -> Any:
        """Take the job's row lock (the per-job mutex) and return the row."""
        query = self.db.for_update(sa.select(jobs).where(*self._job(job_id)))
        return self._saw((await self.conn.execute(query)).one_or_none())

    async def load(self, job_id: str, owner_id: str | None = None) -> JobRecord | None:
        """Read a job with its attempts (``owner_id`` None: any owner)."""
        job = await load_job(self.conn, job_id, owner_id or self.owners.get(job_id))
        if job is not None:
            self.owners[job.id] = job.owner_id
        return job

    async def attempt_row(self, attempt_id: str) -> Any:
        """Read one attempt's row."""
        return self._saw(
            (await self.conn.execute(ATTEMPT_ROW, {"attempt_id": attempt_id})).one_or_none()
        )

    async def attempt_rows(self, job_id: str) -> Sequence[Any]:
        """Read a job's attempts' rows, oldest first."""
        owner = await self.owner_of(job_id)
        return (await self.conn.execute(ATTEMPT_ROWS, {"job_id": job_id, "owner_id": owner})).all()

    # -- writes -----------------------------------------------------------------------------

    async def event(
        self,
        job_id: str,
        kind: str,
        detail: dict[str, Any] | None = None,
        attempt_id: str | None = None,
    ) -> None:
        """Append one audit event."""
        values = {
            "job_id": job_id,
            "owner_id": await self.owner_of(job_id),
            "attempt_id": attempt_id,
            "kind": kind,
            "detail": scrub(detail or {}),
            "at": self.db.now(),
        }
        await self.conn.execute(INSERT_EVENTS, values)

    async def events(self, rows: Sequence[tuple[str, str, dict[str, Any], str | None]]) -> None:
        """Append several audit events in one statement: ``(job_id, kind, detail, attempt)``."""
        at = self.db.now()
        params: dict[str, Any] = {}
        for n, (job_id, kind, detail, attempt_id) in enumerate(rows):
            params.update(
                {
                    f"job_id_{n}": job_id,
                    f"owner_id_{n}": await self.owner_of(job_id),
                    f"attempt_id_{n}": attempt_id,
                    f"kind_{n}": kind,
                    f"detail_{n}": scrub(detail),
                    f"at_{n}": at,
                }
            )
        await self.conn.execute(insert_events_statement(len(rows)), params)

    async def move(
        self,
        attempt_id: str,
        sources: Sequence[AttemptState],
        target: AttemptState,
        values: dict[str, Any],
        extra_where: Sequence[sa.ColumnElement[bool]] = (),
    ) -> Any:
        """Move an attempt from one of ``sources`` to ``target``; return the row or None."""
        return self._saw(
            (
                await self.conn.execute(
                    attempts.update()
                    .where(
                        *by_attempt_id(attempt_id),
                        attempts.c.state.in_([s.value for s in sources]),
                        *extra_where,
                    )
                    .values(state=target.value, **{k: scrub(v) for k, v in values.items()})
                    .returning(*attempts.c)
                )
            ).one_or_none()
        )

    async def refresh_status(self, job_id: str) -> Any:
        """Recompute an undecided job's status from its attempts; return the row (None if
        the job is decided)."""
        return self._saw(
            (
                await self.conn.execute(
                    jobs.update()
                    .where(*await self.owned(job_id), jobs.c.status.not_in(DECIDED))
                    .values(status=derived_status(), updated_at=self.db.now())
                    .returning(*jobs.c)
                )
            ).one_or_none()
        )

    async def insert_attempt(
        self, job_id: str, number: int, provider: str, reason: AttemptReason
    ) -> AttemptRecord:
        """Add attempt ``number`` (``starting``), with its event; wake a runner after."""
        attempt_id = self.db.ids.new("att")
        values = {
            "id": attempt_id,
            "job_id": job_id,
            "owner_id": await self.owner_of(job_id),
            "number": number,
            "provider": provider,
            "reason": reason.value,
            "state": A.STARTING.value,
            "downstream_key": f"{job_id}/{number}",
            "created_at": self.db.now(),
            "ready_at": self.db.now(),
        }
        row = (
            await self.conn.execute(attempts.insert().values(**values).returning(*attempts.c))
        ).one()
        created = {"number": number, "provider": provider, "reason": reason.value}
        await self.event(job_id, "attempt_created", created, attempt_id)
        self.attempt_created = True
        self.jobs.add(job_id)
        return attempt_record(row)

    async def refused(self, job_id: str, blocker: AttemptRecord, reason: AttemptReason) -> None:
        """Record that R4 refused a new attempt, naming the attempt that blocks it."""
        detail = {
            "why": "attempt in progress",
            "blocking": blocker.id,
            "blocking_state": blocker.state.value,
            "reason": reason.value,
        }
        await self.event(job_id, "attempt_refused", detail)

    async def add_failover(self, job_id: str, provider: str) -> AttemptRecord | None:
        """Add a ``failover`` attempt on ``provider`` if R4 allows (no attempt in progress)."""
        job = await self.load(job_id)
        assert job is not None
        if job.status.decided:
            return None
        blocker = blocking_attempt(job.attempts, allow_running=False)
        if blocker is not None:
            await self.refused(job_id, blocker, AttemptReason.FAILOVER)
            return None
        number = max(a.number for a in job.attempts) + 1
        return await self.insert_attempt(job_id, number, provider, AttemptReason.FAILOVER)

    async def close_if_failed(self, job_id: str, error: dict[str, Any]) -> None:
        """Recompute the status; a job left with only failed attempts records the last error."""
        await self.refresh_status(job_id)
        owned = await self.owned(job_id)
        status = (await self.conn.execute(sa.select(jobs.c.status).where(*owned))).scalar_one()
        if status == JobStatus.FAILED.value:
            await self.conn.execute(jobs.update().where(*owned).values(error=scrub(error)))
            await self.event(job_id, "job_failed", error)

    async def cancel_unsent(self, job_id: str, why: str) -> list[str]:
        """Cancel a decided job's attempts that were never sent (e.g. a queued hedge, one
        waiting for capacity)."""
        unsent = list(
            (
                await self.conn.execute(
                    attempts.update()
                    .where(*await self.attempts_of(job_id), attempts.c.state.in_(UNSENT))
                    .values(
                        state=A.CANCELLED.value,
                        finished_at=self.db.now(),
                        error={"reason": f"job_{why}_before_send"},
                    )
                    .returning(attempts.c.id)
                )
            ).scalars()
        )
        for attempt_id in unsent:
            await self.event(job_id, "attempt_cancelled", {"why": why}, attempt_id)
        return unsent

    async def cancel_waiting(self, job_id: str) -> list[str]:
        """Cancel the job's attempts waiting for capacity: a manual attempt supersedes them."""
        superseded = list(
            (
                await self.conn.execute(
                    attempts.update()
                    .where(*await self.attempts_of(job_id), attempts.c.state == A.WAITING.value)
                    .values(
                        state=A.CANCELLED.value,
                        finished_at=self.db.now(),
                        error={"reason": "superseded", "message": "replaced by a manual attempt"},
                    )
                    .returning(attempts.c.id)
                )
            ).scalars()
        )
        for attempt_id in superseded:
            await self.event(job_id, "attempt_cancelled", {"why": "superseded"}, attempt_id)
        return superseded

    # -- results ------------------------------------------------------------------------------

    async def conflict(self, job_id: str, attempt_id: str, why: str) -> TransitionResult:
        """The transition's guard found the attempt elsewhere: say where it is."""
        job = await self.load(job_id)
        attempt = next((a for a in job.attempts if a.id == attempt_id), None) if job else None
        return TransitionResult(TransitionOutcome.CONFLICT, job, attempt, detail=why)

    async def done(self, job_id: str, row: Any) -> TransitionResult:
        """The transition happened: the job as it is now, and the attempt's row."""
        return TransitionResult(
            TransitionOutcome.DONE, await self.load(job_id), attempt_record(row)
        )


async def load_job(
    conn: AsyncConnection, job_id: str, owner_id: str | None = None
) -> JobRecord | None:
    """Read a job with its attempts on ``conn`` (``owner_id`` None: any owner)."""
    query = sa.select(jobs).where(jobs.c.id == job_id)
    if owner_id is not None:
        query = query.where(jobs.c.owner_id == owner_id)
    row = (await conn.execute(query)).one_or_none()
    if row is None:
        return None
    rows = (await conn.execute(ATTEMPT_ROWS, {"job_id": job_id, "owner_id": row.owner_id})).all()
    return job_record(row, rows)
