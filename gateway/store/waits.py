"""Waiting for a provider's capacity (issue 43): an attempt put back to wait, a job whose
deadline passed while it waited, the size of the queue.

A provider that says not now (a rate limit, an overload) before doing anything leaves its
attempt ``waiting``: no lease, no runner, its ``ready_at`` the time before which it is
not sent again, its ``waits`` one more, and an ``attempt_waiting`` event that says why and
until when. A runner claims it again once that time has passed (``claim``), under the
same downstream key: nothing of the first try was done. A job whose deadline passes
while its attempt is still unsent ends ``failed`` with ``job_deadline``, and nothing is
sent for it after that.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import sqlalchemy as sa

from gateway.domain.records import TransitionOutcome, TransitionResult
from gateway.store.claim import IN_QUEUE
from gateway.store.database import Database
from gateway.store.rows import A, naive_utc
from gateway.store.tables import attempts, jobs

log = logging.getLogger("onejob.store")


class Waits:
    """The store's capacity use cases: ``wait_attempt``, ``expire_overdue``, ``queue_depth``."""

    db: Database

    async def wait_attempt(
        self,
        attempt_id: str,
        worker_id: str,
        *,
        ready_at: dt.datetime,
        error: dict[str, Any],
    ) -> TransitionResult:
        """Put this worker's running attempt back to wait until ``ready_at``: its provider
        said not now (``error``) before doing anything, or was known to be out of capacity
        and it was not sent. A conflict when the attempt is no longer this worker's."""
        async with self.db.write_for_attempt(attempt_id) as found:
            if found is None:
                return TransitionResult(TransitionOutcome.NOT_FOUND)
            tx, job_id = found
            until = naive_utc(ready_at)
            row = await tx.move(
                attempt_id,
                [A.RUNNING],
                A.WAITING,
                {
                    "ready_at": until,
                    "waits": attempts.c.waits + 1,
                    "error": error,
                    "read_version": None,
                    "lease_owner": None,
                    "lease_expires_at": None,
                    "deadline_at": None,
                    "started_at": None,
                },
                extra_where=[attempts.c.lease_owner == worker_id],
            )
            if row is None:
                return await tx.conflict(job_id, attempt_id, "not running under this lease")
            detail = {**error, "until": until.isoformat() + "Z", "waits": row.waits}
            await tx.event(job_id, "attempt_waiting", detail, attempt_id)
            await tx.refresh_status(job_id)
            done = await tx.done(job_id, row)
            tx.decided(done.job)
            return done

    async def expire_overdue(self, limit: int = 100) -> list[str]:
        """Fail the jobs whose deadline passed while an attempt was still unsent: each such
        attempt ``failed`` with ``job_deadline`` (nothing of it was in flight), and the job
        with it unless another attempt is still out. Return the attempts' ids."""
        now = self.db.now()
        async with self.db.read() as conn:
            overdue = (
                await conn.execute(
                    sa.select(attempts.c.id)
                    .join(
                        jobs,
                        sa.and_(
                            jobs.c.owner_id == attempts.c.owner_id,
                            jobs.c.id == attempts.c.job_id,
                        ),
                    )
                    # The queue's own condition, so its partial index drives the scan:
                    # with the states as parameters, the plan read every job (20,000,
                    # analyzed: docs/benchmarks.md, at volume).
                    .where(IN_QUEUE, jobs.c.deadline_at <= now)
                    .limit(limit)
                )
            ).scalars()
            ids = list(overdue)
        expired: list[str] = []
        for attempt_id in ids:
            async with self.db.write_for_attempt(attempt_id) as found:
                if found is None:
                    continue
                tx, job_id = found
                job = await tx.load(job_id)
                if job is None or job.deadline_at is None or naive_utc(job.deadline_at) > now:
                    continue
                error = {
                    "outcome": "definite",
                    "reason": "job_deadline",
                    "message": "the job's deadline passed before this attempt could be sent",
                    "deadline_at": naive_utc(job.deadline_at).isoformat() + "Z",
                }
                closed = {"error": error, "finished_at": now}
                row = await tx.move(attempt_id, [A.STARTING, A.WAITING], A.FAILED, closed)
                if row is None:
                    continue
                await tx.event(job_id, "attempt_failed", error, attempt_id)
                await tx.close_if_failed(job_id, error)
                tx.decided(await tx.load(job_id))
                expired.append(attempt_id)
                log.info(
                    "job deadline passed before its attempt was sent",
                    extra={"job_id": job_id, "attempt_id": attempt_id},
                )
        return expired

    async def queue_depth(self) -> dict[str, dict[str, int]]:
        """Count the unsent attempts per provider and state (``starting``, ``waiting``):
        the admission's queue and the metrics' gauges."""
        async with self.db.read_once() as conn:
            rows = (
                await conn.execute(
                    sa.select(attempts.c.provider, attempts.c.state, sa.func.count())
                    .where(IN_QUEUE)  # the queue's partial index (see ``expire_overdue``)
                    .group_by(attempts.c.provider, attempts.c.state)
                )
            ).all()
        depth: dict[str, dict[str, int]] = {}
        for provider, state, count in rows:
            depth.setdefault(provider, {})[state] = count
        return depth
