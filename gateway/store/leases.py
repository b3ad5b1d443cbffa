"""Leases: a running attempt's claim lasts while its worker renews it.

A worker renews its attempt's lease while the call is in flight and until its outcome is
committed. A lease that expired (its worker died, or lost the database for longer than
the lease) makes the attempt ``unknown``: its request may have been sent, and nothing is
sent again (R3).
"""

from __future__ import annotations

import datetime as dt
import logging

import sqlalchemy as sa

from gateway.domain.records import AttemptRecord
from gateway.store.database import Database
from gateway.store.rows import A, attempt_record
from gateway.store.tables import attempts
from gateway.store.transaction import by_attempt_id

log = logging.getLogger("onejob.store")


class Leases:
    """The store's lease use cases: ``renew_lease``, ``reap_expired_leases``."""

    db: Database

    async def renew_lease(self, attempt_id: str, worker_id: str, *, lease_ttl: float) -> bool:
        """Extend the lease of a running attempt this worker holds."""
        async with self.db.write() as tx:
            result = await tx.conn.execute(
                attempts.update()
                .where(
                    *by_attempt_id(attempt_id),
                    attempts.c.lease_owner == worker_id,
                    attempts.c.state == A.RUNNING.value,
                )
                .values(lease_expires_at=self.db.now() + dt.timedelta(seconds=lease_ttl))
            )
            return result.rowcount == 1

    async def reap_expired_leases(self) -> list[AttemptRecord]:
        """Turn running attempts whose lease expired into ``unknown`` (``lease_expired``)."""
        now = self.db.now()
        async with self.db.read() as conn:
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
            async with self.db.write() as tx:
                conn = tx.conn
                await tx.lock_job(job_id)
                row = await tx.move(
                    attempt_id,
                    [A.RUNNING],
                    A.UNKNOWN,
                    {"error": {"outcome": "unknown", "reason": "lease_expired"}},
                    extra_where=[attempts.c.lease_expires_at < now],
                )
                if row is None:
                    continue
                await tx.event(
                    job_id,
                    "attempt_unknown",
                    {"reason": "lease_expired", "lease_owner": row.lease_owner},
                    attempt_id,
                )
                await tx.refresh_status(job_id)
                tx.jobs.add(job_id)
                log.warning(
                    "lease of attempt %s (job %s) expired; outcome unknown",
                    attempt_id,
                    job_id,
                    extra={"job_id": job_id, "attempt_id": attempt_id},
                )
                reaped.append(attempt_record(row))
        return reaped
