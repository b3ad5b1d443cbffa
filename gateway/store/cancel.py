"""Cancelling a job: a decision through compare-and-swap, as a result is.

``UPDATE jobs SET status = 'cancelled', version = version + 1 WHERE id = :job AND status
NOT IN ('succeeded', 'cancelled') AND completed_by IS NULL``: one row, and the job is
cancelled (its unsent attempts with it; attempts in flight will lose when they answer);
none, and it was decided first (the refusal is audited).
"""

from __future__ import annotations

from gateway.domain.records import TransitionOutcome, TransitionResult
from gateway.domain.states import JobStatus
from gateway.store.database import Database
from gateway.store.rows import DECIDED
from gateway.store.tables import jobs


class Cancelling:
    """The store's cancel use case."""

    db: Database

    async def cancel(self, job_id: str, owner_id: str | None = None) -> TransitionResult:
        """Cancel through CAS: unsent attempts are cancelled, in-flight ones will lose."""
        async with self.db.write() as tx:
            where = [jobs.c.id == job_id]
            if owner_id is not None:
                where.append(jobs.c.owner_id == owner_id)
            moved = await tx.conn.execute(
                jobs.update()
                .where(*where, jobs.c.status.not_in(DECIDED), jobs.c.completed_by.is_(None))
                .values(
                    status=JobStatus.CANCELLED.value,
                    version=jobs.c.version + 1,
                    updated_at=self.db.now(),
                )
            )
            job = await tx.load(job_id, owner_id)
            if job is None:
                return TransitionResult(TransitionOutcome.NOT_FOUND)
            if moved.rowcount != 1:
                await tx.event(job_id, "cancel_refused", {"job_status": job.status.value})
                return TransitionResult(
                    TransitionOutcome.CONFLICT, job, detail=f"job is {job.status.value}"
                )
            unsent = await tx.cancel_unsent(job_id, "cancelled")
            detail = {"version": job.version, "unsent_attempts_cancelled": unsent}
            await tx.event(job_id, "job_cancelled", detail)
            tx.jobs.add(job_id)
            cancelled = await tx.load(job_id)
            tx.decided(cancelled)
            return TransitionResult(TransitionOutcome.DONE, cancelled)
