"""Retention: remove settled jobs past the window in which their keys are honoured."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from gateway.domain.clock import ulid_text, unix_milliseconds
from gateway.domain.states import JobStatus
from gateway.store.database import Database
from gateway.store.rows import naive_utc
from gateway.store.tables import attempts, job_events, jobs, shadow_checks, webhook_deliveries

#: Only jobs nobody can change any more are removed: never queued, running or unknown ones.
PRUNABLE = (JobStatus.SUCCEEDED.value, JobStatus.FAILED.value, JobStatus.CANCELLED.value)
PRUNE_BATCH = 1000  # jobs per transaction, so no lock is held for long


def id_bound(cutoff: dt.datetime) -> str:
    """Return a job id above every ULID job id minted before ``cutoff``.

    Job ids are ``job_<ULID>`` and ULIDs sort by time, so the primary key narrows the scan;
    ``created_at`` still decides.
    """
    stamp = ulid_text(unix_milliseconds(cutoff), 0)[:10]  # the 48-bit millisecond time
    return f"job_{stamp}{'Z' * 16}"


class Retention:
    """Delete old settled jobs with their attempts, audit events, shadow checks and webhook
    deliveries."""

    db: Database

    async def prune_jobs(
        self, older_than: dt.datetime, *, batch: int = PRUNE_BATCH, dry_run: bool = False
    ) -> int:
        """Delete up to ``batch`` settled jobs created before ``older_than``; return how many.

        Call until it returns 0. ``dry_run`` counts the batch and deletes nothing.
        """
        cutoff = naive_utc(older_than)
        pick = (
            sa.select(jobs.c.id)
            .where(
                jobs.c.id < id_bound(older_than),
                jobs.c.created_at < cutoff,
                jobs.c.status.in_(PRUNABLE),
            )
            .order_by(jobs.c.id)
            .limit(batch)
        )
        # Under the row locks no transition (they all lock the job first) can reopen one.
        pick = self.db.skip_locked(pick, of=[jobs])
        async with self.db.write() as tx:
            conn = tx.conn
            ids = list((await conn.execute(pick)).scalars())
            if not ids or dry_run:
                return len(ids)
            await conn.execute(job_events.delete().where(job_events.c.job_id.in_(ids)))
            # Shadow checks (issue 38) go with their job: sampled inputs follow retention.
            await conn.execute(shadow_checks.delete().where(shadow_checks.c.job_id.in_(ids)))
            # So do their webhook deliveries (issue 45): each holds the job as the API showed it.
            deliveries = webhook_deliveries.c.job_id
            await conn.execute(webhook_deliveries.delete().where(deliveries.in_(ids)))
            await conn.execute(attempts.delete().where(attempts.c.job_id.in_(ids)))
            await conn.execute(jobs.delete().where(jobs.c.id.in_(ids), jobs.c.status.in_(PRUNABLE)))
            return len(ids)
