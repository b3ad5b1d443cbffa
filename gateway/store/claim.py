"""Claiming an attempt (R7), and what becomes of a claim that was never used.

A claim moves the first unsent attempt of the queue (``starting``, or ``waiting`` for
capacity with its ``ready_at`` passed, in ``ready_at`` order) to ``running`` with a lease
and a deadline, atomically: PostgreSQL locks it with ``FOR UPDATE SKIP LOCKED`` (two
processes never claim one attempt, and never wait on each other), SQLite's write lock
serializes claims.

Never sent is never ``unknown``. An attempt claimed by a creating statement that got no
answer (the database went away with it) was never handed to a runner; the process that
claimed it remembers it (``UnsentClaims``) and, once the database answers, puts it back in
the queue (``release_unsent``: from ``running`` under its own lease, or from ``unknown``
if the reaper got there first), with a ``claim_released`` event. An attempt whose claim
waited so long that too little of its deadline is left gets a fresh one before it is sent
(``extend_deadline``).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from gateway.domain.records import ClaimedAttempt
from gateway.store.database import Database
from gateway.store.rows import DECIDED, A, attempt_record, job_record, naive_utc
from gateway.store.tables import UNSENT_CONDITION, attempts, jobs
from gateway.store.transaction import Stale

log = logging.getLogger("onejob.store")

#: The claim queue's condition, spelled as its partial index is (``tables``): a planner
#: takes that index only for a condition it can see implies the index's, which a bound
#: parameter list would hide.
IN_QUEUE = sa.text(f"attempts.{UNSENT_CONDITION}")


def next_in_line(now: dt.datetime, exclude: Sequence[str] = ()) -> sa.Select[Any]:
    """The first unsent attempt of the queue at ``now`` (naive UTC), and its job's deadline:
    ``starting``, or ``waiting`` with its ``ready_at`` passed, in ``ready_at`` order; none
    of a decided job or one past its deadline, none of a provider in ``exclude``."""
    pick = (
        sa.select(
            attempts.c.id,
            attempts.c.job_id,
            attempts.c.provider,
            attempts.c.state,
            jobs.c.deadline_at,
        )
        # On (owner, job): co-located on Citus, each shard joins its own (docs/scaling.md).
        .join(jobs, sa.and_(jobs.c.owner_id == attempts.c.owner_id, jobs.c.id == attempts.c.job_id))
        .where(
            IN_QUEUE,
            sa.or_(attempts.c.state == A.STARTING.value, attempts.c.ready_at <= now),
            jobs.c.status.not_in(DECIDED),
            sa.or_(jobs.c.deadline_at.is_(None), jobs.c.deadline_at > now),
        )
        .order_by(attempts.c.ready_at, attempts.c.id)
        .limit(1)
    )
    if exclude:
        pick = pick.where(attempts.c.provider.not_in(list(exclude)))
    return pick


class UnsentClaims:
    """The claims this process made and surely never used: attempt id -> (worker, the
    ``started_at`` the claim wrote), so that releasing one undoes that very claim and no
    later one of the same worker."""

    def __init__(self) -> None:
        self.pending: dict[str, tuple[str, dt.datetime | None]] = {}

    def record(self, attempt_id: str, worker_id: str, started_at: dt.datetime | None) -> None:
        """Remember that ``worker_id``'s claim of ``attempt_id`` (made at ``started_at``,
        naive UTC) may have committed, and that it was never used."""
        self.pending[attempt_id] = (worker_id, started_at)

    def used(self, attempt_id: str) -> None:
        """Forget ``attempt_id``: this process claimed it again, and has it."""
        self.pending.pop(attempt_id, None)


class Claiming:
    """The store's claim use cases: ``claim_next_attempt``, ``extend_deadline``,
    ``never_sent``, ``release_unsent``."""

    db: Database
    unsent: UnsentClaims

    def unavailable(self, exc: BaseException, where: str) -> bool:
        """Say whether ``exc`` means the database is unavailable (``SqlJobStore``'s)."""
        raise NotImplementedError

    async def claim_next_attempt(
        self,
        worker_id: str,
        *,
        lease_ttl: float,
        deadline_s: dict[str, float],
        default_deadline_s: float,
        exclude: Sequence[str] = (),
    ) -> ClaimedAttempt | None:
        """Claim the first unsent attempt in the queue: ``running``, leased, with a deadline.

        The queue is the unsent attempts in ``ready_at`` order: ``starting`` ones, and
        ``waiting`` ones whose ``ready_at`` has passed; none of a provider in ``exclude``
        (one this process cannot call now: paced, paused, its circuit open), none of a job
        past its deadline (the reaper fails those). The call's deadline is the provider's
        timeout, or what is left of the job's deadline when that is sooner.

        A claim whose transaction fails once it chose its attempt may still have committed
        (its COMMIT went out and its answer was lost): nobody runs that attempt, so it is
        remembered as never sent (``UnsentClaims``), and released once the database
        answers. A claim that did not commit matches nothing then.
        """
        chosen: list[tuple[str, dt.datetime]] = []
        try:
            claimed = await self._claim(
                worker_id, lease_ttl, deadline_s, default_deadline_s, exclude, chosen
            )
        except Stale:
            return None
        except BaseException:
            for attempt_id, started_at in chosen:
                self.unsent.record(attempt_id, worker_id, started_at)
            raise
        if claimed is not None:
            self.unsent.used(claimed.attempt.id)
        return claimed

    async def _claim(
        self,
        worker_id: str,
        lease_ttl: float,
        deadline_s: dict[str, float],
        default_deadline_s: float,
        exclude: Sequence[str],
        chosen: list[tuple[str, dt.datetime]],
    ) -> ClaimedAttempt | None:
        async with self.db.write() as tx:
            conn = tx.conn
            now = self.db.now()
            # Lock the attempt and its job together and skip either if someone holds it, so
            # a claim never waits behind (or deadlocks with) a cancel or a finalize.
            pick = self.db.claim_pick(next_in_line(now, exclude))
            candidate = (await conn.execute(pick)).one_or_none()
            if candidate is None:
                return None
            chosen.append((candidate.id, now))  # the claim below writes ``started_at=now``
            deadline = now + dt.timedelta(
                seconds=deadline_s.get(candidate.provider, default_deadline_s)
            )
            if candidate.deadline_at is not None:
                deadline = min(deadline, candidate.deadline_at)
            version = sa.select(jobs.c.version).where(
                jobs.c.owner_id == attempts.c.owner_id, jobs.c.id == attempts.c.job_id
            )
            row = (
                await conn.execute(
                    attempts.update()
                    .where(attempts.c.id == candidate.id, attempts.c.state == candidate.state)
                    .values(
                        state=A.RUNNING.value,
                        read_version=version.scalar_subquery(),
                        lease_owner=worker_id,
                        lease_expires_at=now + dt.timedelta(seconds=lease_ttl),
                        deadline_at=deadline,
                        started_at=now,
                        # A waiting attempt's "not now" is history (its attempt_waiting
                        # events), not the error of the try that starts now.
                        error=None,
                    )
                    .returning(*attempts.c)
                )
            ).one_or_none()
            if row is None:
                return None
            await tx.event(
                row.job_id,
                "attempt_running",
                {"worker": worker_id, "read_version": row.read_version},
                row.id,
            )
            job_row = await tx.refresh_status(row.job_id)
            tx.jobs.add(row.job_id)
            if job_row is None:  # decided meanwhile (SQLite has no row lock to stop it)
                raise Stale
            return ClaimedAttempt(attempt=attempt_record(row), job=job_record(job_row))

    async def extend_deadline(
        self, attempt_id: str, worker_id: str, *, deadline_s: float, lease_ttl: float
    ) -> bool:
        """Give a running attempt of this worker's, not sent yet, a fresh deadline and lease.

        For an attempt that waited so long between its claim and its call (a slow
        database) that too little of its deadline is left to call with: sent now, it
        would end ``unknown`` without the provider ever seeing it.
        """
        async with self.db.write_for_attempt(attempt_id) as found:
            if found is None:
                return False
            tx, job_id = found
            now = self.db.now()
            row = await tx.move(
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
            await tx.event(
                job_id,
                "deadline_renewed",
                {"why": "claimed long before its call", "deadline_s": deadline_s},
                attempt_id,
            )
            return True

    def never_sent(
        self, attempt_id: str, worker_id: str, started_at: dt.datetime | None = None
    ) -> None:
        """Remember that ``worker_id`` claimed ``attempt_id`` and surely never sent it.

        The claim could not be used (the statement that made it got no answer, or the
        database failed before the call): ``release_unsent`` puts the attempt back in
        the queue once the database answers, so a call that never left does not end
        ``unknown`` for an operator to resolve.
        """
        self.unsent.record(
            attempt_id, worker_id, None if started_at is None else naive_utc(started_at)
        )

    async def release_unsent(self) -> list[str]:
        """Put the attempts ``never_sent`` names back in the queue; return their ids.

        Each goes from ``running`` (its lease still this worker's), or from ``unknown``
        (its lease expired meanwhile, and this worker, the only one that could have sent
        it, knows it did not), back to ``starting``, with a ``claim_released`` event. An
        attempt that does not exist (its creation never committed) or moved on is
        forgotten; one the database cannot be asked about now is tried again next time.
        """
        released: list[str] = []
        for attempt_id, (worker_id, started_at) in list(self.unsent.pending.items()):
            if self.unsent.pending.get(attempt_id) != (worker_id, started_at):
                continue  # claimed again by this process meanwhile: it has it now
            try:
                if await self._release(attempt_id, worker_id, started_at):
                    released.append(attempt_id)
            except Exception as exc:
                if self.unavailable(exc, "release of an unsent claim"):
                    break  # still away: every other release would fail the same way
                raise
            self.unsent.pending.pop(attempt_id, None)
        return released

    async def _release(
        self, attempt_id: str, worker_id: str, started_at: dt.datetime | None
    ) -> bool:
        claim = [attempts.c.lease_owner == worker_id]
        if started_at is not None:  # that very claim, not a later one of this worker
            claim.append(attempts.c.started_at == started_at)
        async with self.db.write_for_attempt(attempt_id) as found:
            if found is None:
                return False
            tx, job_id = found
            before = await tx.attempt_row(attempt_id)
            row = await tx.move(
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
                    "ready_at": self.db.now(),
                },
                extra_where=claim,
            )
            if row is None:
                return False
            detail = {"why": "never sent", "from": before.state, "worker": worker_id}
            await tx.event(job_id, "claim_released", detail, attempt_id)
            await tx.refresh_status(job_id)
            tx.attempt_created = True  # a runner takes it from the queue
            log.warning(
                "attempt %s (job %s) was claimed but never sent; back in the queue",
                attempt_id,
                job_id,
                extra={"job_id": job_id, "attempt_id": attempt_id, "from": before.state},
            )
            return True
