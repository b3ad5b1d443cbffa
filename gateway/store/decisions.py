"""Decisions: the compare-and-swap of R5 (finalize, resolve) and cancel."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.domain.jsontext import scrub
from gateway.domain.records import (
    FinalizeOutcome,
    FinalizeResult,
    JobRecord,
    TransitionOutcome,
    TransitionResult,
)
from gateway.domain.states import AttemptState, JobStatus
from gateway.store import pg_round_trips as pg
from gateway.store import sqlite_round_trips as sq
from gateway.store.base import Stale, StoreBase, WriteTx
from gateway.store.rows import (
    DECIDED,
    A,
    job_record,
)
from gateway.store.statements import (
    CAS_RUNNING,
    FINISH_RUNNING,
)
from gateway.store.tables import attempts, jobs

log = logging.getLogger("onejob.store")


PROVIDER_TEXT_LIMIT = 200  # characters: the width of the provider's ids and model names


def fit(value: str | None) -> str | None:
    """Make a provider-supplied name storable: scrubbed, and cut to its column's width."""
    return None if value is None else scrub(value)[:PROVIDER_TEXT_LIMIT]


class _NotHere(Exception):
    """The bare SQLite decision rolls back: the general transaction decides instead."""


class Decisions(StoreBase):
    """Decide a job: exactly one attempt (or a cancel) wins."""

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
        self,
        attempt_id: str,
        result: Any,
        *,
        provider_request_id: str | None = None,
        reported_model: str | None = None,
    ) -> FinalizeResult:
        """Compare-and-swap the job's result (R5); the loser is ``lost`` and its payload dropped."""
        try:
            return await self._finalize(attempt_id, result, provider_request_id, reported_model)
        except Stale:
            return FinalizeResult(FinalizeOutcome.STALE, attempt_id)

    async def _finalize(
        self,
        attempt_id: str,
        result: Any,
        provider_request_id: str | None,
        reported_model: str | None,
    ) -> FinalizeResult:
        bare = self._finalize_on_sqlite if self._sqlite else self._finalize_in_one_statement
        won = await bare(attempt_id, result, provider_request_id, reported_model)
        if won is not None:
            return won
        # Not won there, with nothing written (lost, stale, the job changed while the
        # statement waited for its lock, or unsent siblings to cancel on SQLite): the
        # transaction below decides with fresh statements (its CAS cannot win a race the
        # bare one lost: versions only grow, decisions are final).
        async with self._tx() as tx:
            conn = tx.conn
            now = self._now()
            params = {"attempt_id": attempt_id, "result": result, "now": now}
            job_row = (await conn.execute(CAS_RUNNING, params)).one_or_none()
            if job_row is None:
                return await self._not_won(tx, attempt_id, result)
            job_id = job_row.id
            tx.changed(job_id)
            finish = {
                "attempt_id": attempt_id,
                "target": A.SUCCEEDED.value,
                "finished_at": now,
                "provider_request_id": fit(provider_request_id),
                "reported_model": fit(reported_model),
            }
            row = (await conn.execute(FINISH_RUNNING, finish)).one_or_none()
            if row is None:
                # Reaped to `unknown` between the CAS's read and its lock: undo it all.
                raise Stale
            detail = {"version": job_row.version, "provider": row.provider}
            await self._event(conn, job_id, "attempt_succeeded", detail, attempt_id)
            siblings = await self._attempt_rows(conn, job_id)
            if any(a.state == A.STARTING.value for a in siblings):
                await self._cancel_unsent(conn, job_id, "decided")
                siblings = await self._attempt_rows(conn, job_id)
            decided = job_record(job_row, siblings)
            tx.decided(decided)
            return _won(attempt_id, decided)

    async def _finalize_on_sqlite(
        self,
        attempt_id: str,
        result: Any,
        provider_request_id: str | None,
        reported_model: str | None,
    ) -> FinalizeResult | None:
        """SQLite: the winning decision's statements on the pooled connection
        (``sqlite_round_trips``), in the transaction ``_tx`` would open.

        None, with nothing written: the CAS did not win, or the job has unsent attempts
        to cancel; the caller's transaction decides.
        """
        codec = self._sqlite_codec
        assert codec is not None
        try:
            async with self._write_lock, sq.write_transaction(self.engine) as driver:
                now = self._now()
                cas = (
                    codec.bind("jobs", "result", result),
                    attempt_id,
                    codec.bind("jobs", "updated_at", now),
                    attempt_id,
                    attempt_id,
                )
                cursor = await driver.execute(sq.CAS_RUNNING, cas)
                raw = await cursor.fetchone()
                if raw is None:
                    raise _NotHere
                job_row = codec.job_row(raw)
                at = codec.bind("attempts", "finished_at", now)
                finish = (at, fit(provider_request_id), fit(reported_model), attempt_id)
                cursor = await driver.execute(sq.FINISH_RUNNING, finish)
                moved = await cursor.fetchone()
                if moved is None:
                    # Reaped to `unknown` between the CAS's read and its lock: undo it all.
                    raise Stale
                detail = {"version": job_row.version, "provider": moved[0]}
                event = (job_row.id, attempt_id, "attempt_succeeded", scrub(detail), now)
                await driver.execute(sq.insert_events_sql(1), codec.event_params([event]))
                cursor = await driver.execute(sq.SELECT_ATTEMPTS, (job_row.id,))
                siblings = [codec.attempt_row(a) for a in await cursor.fetchall()]
                if any(a.state == A.STARTING.value for a in siblings):
                    raise _NotHere
        except _NotHere:
            return None
        decided = job_record(job_row, siblings)
        self._committed({decided.id: decided}, False)  # as ``_tx`` does after its commit
        return _won(attempt_id, decided)

    async def _finalize_in_one_statement(
        self,
        attempt_id: str,
        result: Any,
        provider_request_id: str | None,
        reported_model: str | None,
    ) -> FinalizeResult | None:
        """PostgreSQL: the winning decision in one round trip (``pg.FINALIZE_ALONE``).

        None: the CAS did not win; the caller finds out why in a transaction.
        """
        sql = pg.FINALIZE_ALONE
        params = (
            attempt_id,
            pg.as_json(result),
            self._now(),
            fit(provider_request_id),
            fit(reported_model),
        )
        async with pg.checkout(self.engine, sql, self._kept) as driver:
            records = await driver.fetch(sql, *params)
        if not records:
            return None
        decided = pg.job_of(records)
        # This process's waiters; the statement sent the others' pg_notify itself.
        self.hub.publish_job(decided.id, decided)
        return _won(attempt_id, decided)

    async def _not_won(self, tx: WriteTx, attempt_id: str, result: Any) -> FinalizeResult:
        """The CAS found nothing to swap: the attempt moved (stale), or it lost the race."""
        current = await self._attempt_row(tx.conn, attempt_id)
        if current is not None and current.state == A.SUCCEEDED.value:
            # The same answer again: a try whose commit went through while its answer
            # was lost (a failover). The decision is this attempt's, taken once.
            decided = await self._load(tx.conn, current.job_id)
            if decided is not None and (decided.completed_by, decided.result) == (
                attempt_id,
                result,
            ):
                return _won(attempt_id, decided)
        if current is None or current.state != A.RUNNING.value:
            return FinalizeResult(FinalizeOutcome.STALE, attempt_id)
        # The job before the attempt, the order every writer takes: ``_lose`` moves the
        # attempt, then its event's foreign key wants the job, and the reaper holds the
        # job and wants the attempt (a deadlock a review reproduced).
        await self._lock_job(tx.conn, current.job_id)
        tx.jobs.add(current.job_id)
        lost = await self._lose(tx.conn, current.job_id, attempt_id, [A.RUNNING])
        tx.decided(lost.job)
        return lost

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
            cancelled = await self._load(conn, job_id)
            tx.decided(cancelled)
            return TransitionResult(TransitionOutcome.DONE, cancelled)

    async def resolve(
        self,
        attempt_id: str,
        outcome: AttemptState,
        *,
        result: Any = None,
        note: str = "",
        next_provider: str | None = None,
        evidence: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> TransitionResult:
        """Resolve an ``unknown`` attempt out of band (``succeeded`` goes through R5).

        ``next_provider`` (with outcome ``failed``) adds the failover attempt in the same
        transaction, so resolving unblocks the job and the next try at once. ``evidence``
        (the reconciler's finding) goes into the audit event and the attempt's
        ``reconciler`` column; ``error`` replaces the default error of a failed attempt.
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
            detail: dict[str, Any] = {"outcome": outcome.value, "note": note}
            if evidence is not None:
                detail["evidence"] = evidence
                await conn.execute(
                    attempts.update()
                    .where(attempts.c.id == attempt_id)
                    .values(reconciler=scrub(evidence))
                )
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
            error = {
                "reason": f"resolved_{outcome.value}",
                **(error or {}),
                "note": note,
                "previous": current.error,
            }
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


def _won(attempt_id: str, decided: JobRecord) -> FinalizeResult:
    return FinalizeResult(
        FinalizeOutcome.WON,
        attempt_id,
        winner=attempt_id,
        job_status=JobStatus.SUCCEEDED,
        job=decided,
    )
