"""Guarded attempt transitions: add (R4), claim (R7), lease, unknown, failed, reaping."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import sqlalchemy as sa

from gateway.domain.guards import blocking_attempt
from gateway.domain.records import (
    AddAttemptOutcome,
    AddAttemptResult,
    AttemptRecord,
    ClaimedAttempt,
    TransitionOutcome,
    TransitionResult,
)
from gateway.domain.states import AttemptReason, AttemptState, JobStatus
from gateway.store.base import Stale, StoreBase
from gateway.store.rows import (
    DECIDED,
    A,
    attempt_record,
    job_record,
)
from gateway.store.tables import attempts, jobs

log = logging.getLogger("onejob.store")


class Transitions(StoreBase):
    """Move attempts through their states, each a conditional UPDATE."""

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
        except Stale:
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
                raise Stale
            return ClaimedAttempt(attempt=attempt_record(row), job=job_record(job_row))

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

    async def extend_deadline(
        self, attempt_id: str, worker_id: str, *, deadline_s: float, lease_ttl: float
    ) -> bool:
        """Give a running attempt of this worker's, not sent yet, a fresh deadline and lease.

        For an attempt that waited so long between its claim and its call (a slow
        database) that too little of its deadline is left to call with: sent now, it
        would end ``unknown`` without the provider ever seeing it.
        """
        async with self._attempt_tx(attempt_id) as found:
            if found is None:
                return False
            tx, job_id = found
            now = self._now()
            row = await self._move(
                tx.conn,
                attempt_id,
                [A.RUNNING],
                A.RUNNING,
                {
                    "deadline_at": now + dt.timedelta(seconds=deadline_s),
                    "lease_expires_at": now + dt.timedelta(seconds=lease_ttl),
                },
                extra_where=[attempts.c.lease_owner == worker_id],
            )
            if row is None:
                return False
            await self._event(
                tx.conn,
                job_id,
                "deadline_renewed",
                {"why": "claimed long before its call", "deadline_s": deadline_s},
                attempt_id,
            )
            return True

    async def release_unsent(self) -> list[str]:
        """Put the attempts ``never_sent`` names back in the queue; return their ids.

        Each goes from ``running`` (its lease still this worker's), or from ``unknown``
        (its lease expired meanwhile, and this worker, the only one that could have sent
        it, knows it did not), back to ``starting``, with a ``claim_released`` event. An
        attempt that does not exist (its creation never committed) or moved on is
        forgotten; one the database cannot be asked about now is tried again next time.
        """
        released: list[str] = []
        for attempt_id, worker_id in list(self._unsent.items()):
            try:
                if await self._release(attempt_id, worker_id):
                    released.append(attempt_id)
            except Exception as exc:
                if self.unavailable(exc, "release of an unsent claim"):
                    break  # still away: every other release would fail the same way
                raise
            del self._unsent[attempt_id]
        return released

    async def _release(self, attempt_id: str, worker_id: str) -> bool:
        async with self._attempt_tx(attempt_id) as found:
            if found is None:
                return False
            tx, job_id = found
            before = await self._attempt_row(tx.conn, attempt_id)
            row = await self._move(
                tx.conn,
                attempt_id,
                [A.RUNNING, A.UNKNOWN],
                A.STARTING,
                {
                    "read_version": None,
                    "lease_owner": None,
                    "lease_expires_at": None,
                    "deadline_at": None,
                    "started_at": None,
                    "error": None,
                },
                extra_where=[attempts.c.lease_owner == worker_id],
            )
            if row is None:
                return False
            detail = {"why": "never sent", "from": before.state, "worker": worker_id}
            await self._event(tx.conn, job_id, "claim_released", detail, attempt_id)
            await self._refresh_status(tx.conn, job_id)
            tx.attempt_created = True  # a runner takes it from the queue
            log.warning(
                "attempt %s (job %s) was claimed but never sent; back in the queue",
                attempt_id,
                job_id,
                extra={"job_id": job_id, "attempt_id": attempt_id, "from": before.state},
            )
            return True

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
            done = await self._done(conn, job_id, row)
            tx.decided(done.job)
            return done

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
            tx.decided(result.job)
            return TransitionResult(result.outcome, result.job, result.attempt, added=added)

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
                reaped.append(attempt_record(row))
        return reaped
