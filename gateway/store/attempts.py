"""An attempt's own transitions: added (R4's guard), failed definitely, outcome unknown.

A new attempt is refused while any attempt of the job is ``starting`` or ``unknown`` (and,
unless it is the dispatcher's hedge, ``running``): the refusal names the blocking attempt
and is audited. A definite failure may add the failover attempt in the same transaction,
and a job left with only failed attempts is ``failed``. An attempt whose outcome is not
known is ``unknown``, and stays so until resolved (``resolve``).
"""

from __future__ import annotations

import logging
from typing import Any

from gateway.domain.guards import blocking_attempt
from gateway.domain.records import (
    AddAttemptOutcome,
    AddAttemptResult,
    TransitionOutcome,
    TransitionResult,
)
from gateway.domain.states import AttemptReason, AttemptState, JobStatus
from gateway.store.database import Database
from gateway.store.rows import A
from gateway.store.tables import jobs

log = logging.getLogger("onejob.store")


class Attempts:
    """The store's attempt use cases: ``add_attempt``, ``fail_attempt``, ``mark_unknown``."""

    db: Database

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
        async with self.db.write() as tx:
            conn = tx.conn
            if owner_id is not None:  # the job's row by its owner too: another's is not found
                tx.owners[job_id] = owner_id
            row = await tx.lock_job(job_id)
            if row is None or (owner_id is not None and row.owner_id != owner_id):
                return AddAttemptResult(AddAttemptOutcome.NOT_FOUND)
            job = await tx.load(job_id)
            assert job is not None
            if job.status.decided:
                await tx.event(
                    job_id,
                    "attempt_refused",
                    {"why": f"job {job.status.value}", "reason": reason.value},
                )
                return AddAttemptResult(AddAttemptOutcome.CLOSED, job=job)
            manual = reason is AttemptReason.MANUAL
            blocker = blocking_attempt(
                job.attempts, allow_running=allow_running, supersede_waiting=manual
            )
            if blocker is not None:
                await tx.refused(job_id, blocker, reason)
                return AddAttemptResult(AddAttemptOutcome.BLOCKED, blocking=blocker, job=job)
            if manual:
                # An attempt waiting for its provider's capacity has nothing in flight:
                # the client's button replaces it rather than waiting behind it.
                await tx.cancel_waiting(job_id)
            if job.status is JobStatus.FAILED:
                # Reopening a failed job is a decision: it changes the version.
                await conn.execute(
                    jobs.update()
                    .where(*await tx.owned(job_id), jobs.c.version == job.version)
                    .values(version=jobs.c.version + 1, error=None)
                )
                await tx.event(job_id, "job_reopened", {"version": job.version + 1})
            number = max((a.number for a in job.attempts), default=0) + 1
            attempt = await tx.insert_attempt(job_id, number, provider, reason)
            await tx.refresh_status(job_id)
            job = await tx.load(job_id)
            return AddAttemptResult(AddAttemptOutcome.ADDED, attempt=attempt, job=job)

    async def mark_unknown(
        self,
        attempt_id: str,
        error: dict[str, Any],
        *,
        expected: AttemptState = AttemptState.RUNNING,
    ) -> TransitionResult:
        """Move an attempt (and its job) to ``unknown``: its outcome is not known."""
        async with self.db.write_for_attempt(attempt_id) as found:
            if found is None:
                return TransitionResult(TransitionOutcome.NOT_FOUND)
            tx, job_id = found
            row = await tx.move(attempt_id, [expected], A.UNKNOWN, {"error": error})
            if row is None:
                return await tx.conflict(job_id, attempt_id, "not in expected state")
            await tx.event(job_id, "attempt_unknown", error, attempt_id)
            await tx.refresh_status(job_id)
            done = await tx.done(job_id, row)
            tx.decided(done.job)
            return done

    async def fail_attempt(
        self, attempt_id: str, error: dict[str, Any], *, next_provider: str | None = None
    ) -> TransitionResult:
        """Record a definite failure; add a ``failover`` attempt on ``next_provider`` if given."""
        async with self.db.write_for_attempt(attempt_id) as found:
            if found is None:
                return TransitionResult(TransitionOutcome.NOT_FOUND)
            tx, job_id = found
            row = await tx.move(
                attempt_id,
                [A.STARTING, A.RUNNING],
                A.FAILED,
                {"error": error, "finished_at": self.db.now()},
            )
            if row is None:
                return await tx.conflict(job_id, attempt_id, "not starting or running")
            await tx.event(job_id, "attempt_failed", error, attempt_id)
            added = None
            if next_provider is not None:
                added = await tx.add_failover(job_id, next_provider)
            await tx.close_if_failed(job_id, error)
            result = await tx.done(job_id, row)
            tx.decided(result.job)
            return TransitionResult(result.outcome, result.job, result.attempt, added=added)
