"""Retention: remove settled jobs past the window in which their keys are honoured.

``prune_all`` is what ``onejob jobs prune`` runs beside live traffic: batch after batch of
``PRUNE_BATCH`` jobs, oldest first, each batch in a transaction of its own (no row lock
is held for long, and none on a job anybody can still change), each starting where the
one before ended, and resting between batches as long as the batch took times
``PRUNE_REST``. Measured with ``python -m bench.volume`` (docs/benchmarks.md, at
volume): 1 M of 10 M jobs pruned under sync traffic; docs/operations.md says what that
costs the traffic.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable

import sqlalchemy as sa

from gateway.domain.clock import ulid_text, unix_milliseconds
from gateway.domain.states import JobStatus
from gateway.store.database import Database
from gateway.store.rows import naive_utc
from gateway.store.tables import attempts, job_events, jobs, shadow_checks, webhook_deliveries

#: Only jobs nobody can change any more are removed: never queued, running or unknown ones.
PRUNABLE = (JobStatus.SUCCEEDED.value, JobStatus.FAILED.value, JobStatus.CANCELLED.value)
PRUNE_BATCH = 1000  # jobs per transaction, so no lock is held for long
#: Seconds of rest between batches per second a batch took: prune works half the time,
#: and live traffic has the database the other half.
PRUNE_REST = 1.0


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

        Call until it returns 0 (or call ``prune_all``). ``dry_run`` counts the batch and
        deletes nothing.
        """
        return len(await self._prune(older_than, batch, dry_run, after=None))

    async def prune_all(
        self,
        older_than: dt.datetime,
        *,
        batch: int = PRUNE_BATCH,
        rest: float = PRUNE_REST,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Delete every settled job created before ``older_than``, ``batch`` at a time,
        resting ``rest`` times as long as each batch took; return how many.

        Each batch starts past the last id of the one before: the jobs just deleted stay
        in the primary key's pages until vacuum clears them, and a scan from the start
        would walk over all of them again at every batch. A job skipped because a
        transition held it at that moment is left for the next run.
        """
        loop = asyncio.get_running_loop()
        total, after = 0, None
        while True:
            began = loop.time()
            ids = await self._prune(older_than, batch, False, after)
            if not ids:
                return total
            total, after = total + len(ids), ids[-1]
            if progress is not None:
                progress(total)
            await asyncio.sleep((loop.time() - began) * rest)

    async def _prune(
        self, older_than: dt.datetime, batch: int, dry_run: bool, after: str | None
    ) -> list[str]:
        """Delete one batch (of jobs past ``after``, in id order); return their ids."""
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
        if after is not None:
            pick = pick.where(jobs.c.id > after)
        # Under the row locks no transition (they all lock the job first) can reopen one.
        pick = self.db.skip_locked(pick, of=[jobs])
        async with self.db.write() as tx:
            conn = tx.conn
            ids = list((await conn.execute(pick)).scalars())
            if not ids or dry_run:
                return ids
            await conn.execute(job_events.delete().where(job_events.c.job_id.in_(ids)))
            # Shadow checks (issue 38) go with their job: sampled inputs follow retention.
            await conn.execute(shadow_checks.delete().where(shadow_checks.c.job_id.in_(ids)))
            # So do their webhook deliveries (issue 45): each holds the job as the API showed it.
            deliveries = webhook_deliveries.c.job_id
            await conn.execute(webhook_deliveries.delete().where(deliveries.in_(ids)))
            await conn.execute(attempts.delete().where(attempts.c.job_id.in_(ids)))
            await conn.execute(jobs.delete().where(jobs.c.id.in_(ids), jobs.c.status.in_(PRUNABLE)))
            return ids
