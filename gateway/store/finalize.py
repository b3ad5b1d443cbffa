"""R5: exactly one attempt writes the job's result, by compare-and-swap.

The compare-and-swap is written once per database (``pg_cas``, ``SQLITE_CAS``)::

    UPDATE jobs SET status = 'succeeded', result = :result, completed_by = :attempt,
                    version = version + 1
    WHERE id = :job AND version = :read_version AND completed_by IS NULL

One row: the attempt won. None: it lost (another attempt, or a cancel, decided first) and
becomes ``lost``, its payload dropped, with a ``race_lost`` event naming the winner. Every
path that decides a job with a result goes through it: a running attempt's answer here, an
``unknown`` attempt resolved with a result (``resolve``).

A running attempt's winning decision (the guard, the attempt's move, its unsent siblings
cancelled, the events) is written once per database: PostgreSQL's as one statement
(``finalize_statement``), SQLite's as a few statements over one write transaction
(``SqliteDecisions.win``). Each runs two ways: alone, in one round trip
(``finalize_alone``, the usual case), and, when that did not win (lost, stale, a job that
changed while the statement waited), inside a transaction that holds the job's lock first
(``Finalizing._decide``), where nothing can change under it: won there, or not won at all
(``_not_won``: lost, stale, or the same answer again). Its CAS cannot win a race the
one-statement path lost, as versions only grow and decisions are final.
"""

from __future__ import annotations

import logging
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.domain.jsontext import scrub
from gateway.domain.records import FinalizeOutcome, FinalizeResult, JobRecord
from gateway.domain.states import AttemptState, JobStatus
from gateway.notify import JOBS_CHANNEL
from gateway.store.database import Database, Postgres, Run, Sqlite, run_on
from gateway.store.events import insert_events_sql
from gateway.store.rows import (
    ATTEMPT_COLUMNS,
    JOB_COLUMNS,
    A,
    as_json,
    job_of,
    job_record,
    prefixed,
)
from gateway.store.tables import UNSENT_SQL, jobs
from gateway.store.transaction import Stale, WriteTx

log = logging.getLogger("onejob.store")

PROVIDER_TEXT_LIMIT = 200  # characters: the width of the provider's ids and model names


def fit(value: str | None) -> str | None:
    """Make a provider-supplied name storable: scrubbed, and cut to its column's width."""
    return None if value is None else scrub(value)[:PROVIDER_TEXT_LIMIT]


# -- PostgreSQL ------------------------------------------------------------------------------


def pg_cas(
    job: str, read_version: str, attempt: str, result: str, now: str, from_: str = ""
) -> str:
    """R5's compare-and-swap on PostgreSQL: the one place its guard is written."""
    return (
        f"UPDATE jobs SET status = 'succeeded', result = {result}, error = NULL,"
        f" completed_by = {attempt}, version = jobs.version + 1, updated_at = {now}{from_}"
        f" WHERE jobs.id = {job} AND jobs.version = {read_version}"
        " AND jobs.completed_by IS NULL"
    )


#: The compare-and-swap inside a transaction (``resolve``, the fallback path).
PG_CAS = pg_cas("$1", "$2", "$3", "$4::jsonb", "$5") + " RETURNING jobs.*"


def finalize_statement(notify: bool) -> str:
    """R5 for a running attempt as one statement: lock the job, then the attempt (the
    order every other writer takes), compare-and-swap, move the attempt, cancel the job's
    unsent attempts, write the events, and return the decided job with a row per attempt.

    Alone (``notify``), it also wakes the job's waiters in other processes (``pg_notify``
    here, not after the commit: ``pg_wakeups`` says why). Once the attempt is locked and
    seen ``running`` nothing can move it, so the CAS and the attempt's move happen
    together or not at all; ``guard`` divides by zero (aborting the statement, so nothing
    is written) should a CAS ever find no attempt to move.

    Alone, the statement's snapshot is taken before it waits for the job's lock, and a
    sibling attempt added or moved by a transaction that committed meanwhile would be
    invisible to it (left ``starting``, or returned in its old state). Every such writer
    also updates the job's row (``refresh_status``), so the statement acts only if the
    row it locked is the row its snapshot sees (same ``xmin``). No row: the CAS did not
    win here (lost, the attempt moved, or the job changed while waiting). Inside a
    transaction that locked the job first, the snapshot comes after the lock and the
    ``xmin`` always matches: no row there means not won at all.
    ``FOR NO KEY UPDATE``: the row's key never changes, and event inserts (whose foreign
    key takes ``KEY SHARE`` on the job) need not wait for the decision.
    """
    wake = f"pg_notify('{JOBS_CHANNEL}', cas.id) AS notified, " if notify else ""
    return f"""
WITH j AS (
  SELECT id, owner_id, xmin AS locked_xmin FROM jobs
  WHERE id = (SELECT job_id FROM attempts WHERE id = $1)
  FOR NO KEY UPDATE
), a AS (
  SELECT job_id, read_version FROM attempts
  WHERE id = $1 AND owner_id = (SELECT owner_id FROM j) AND state = 'running'
    AND job_id IN (
      SELECT j.id FROM j
      WHERE j.locked_xmin = (SELECT xmin FROM jobs AS seen WHERE seen.id = j.id)
    )
  FOR UPDATE
), cas AS (
  {pg_cas("a.job_id", "a.read_version", "$1", "$2::jsonb", "$3", from_=" FROM a")}
  RETURNING jobs.*
), att AS (
  UPDATE attempts SET state = 'succeeded', finished_at = $3, provider_request_id = $4,
                      reported_model = $5
  WHERE id = $1 AND EXISTS (SELECT 1 FROM cas)
  RETURNING *
), unsent AS (
  UPDATE attempts SET state = 'cancelled', finished_at = $3,
                      error = '{{"reason": "job_decided_before_send"}}'::jsonb
  WHERE job_id = (SELECT id FROM cas) AND state IN {UNSENT_SQL}
  RETURNING *
), events AS (
  INSERT INTO job_events (job_id, owner_id, attempt_id, kind, detail, at)
  SELECT att.job_id, att.owner_id, att.id, 'attempt_succeeded',
         jsonb_build_object('version', cas.version, 'provider', att.provider), $3
  FROM cas, att
  UNION ALL
  SELECT unsent.job_id, unsent.owner_id, unsent.id, 'attempt_cancelled',
         '{{"why": "decided"}}'::jsonb, $3
  FROM unsent
), others AS (
  SELECT * FROM attempts
  WHERE job_id = (SELECT id FROM cas) AND id <> $1 AND id NOT IN (SELECT id FROM unsent)
)
SELECT {prefixed("cas", "j_", JOB_COLUMNS)}, {prefixed("x", "a_", ATTEMPT_COLUMNS)},
       {wake}1 / (SELECT count(*) FROM att)::int AS guard
FROM cas LEFT JOIN (
  SELECT * FROM att UNION ALL SELECT * FROM unsent UNION ALL SELECT * FROM others
) AS x ON true
ORDER BY x.number"""


#: The winning decision sent alone, its NOTIFY inside.
FINALIZE_ALONE = finalize_statement(notify=True)
#: The same inside a transaction holding the job's lock: its NOTIFY goes after the commit.
FINALIZE_LOCKED = finalize_statement(notify=False)


class PostgresDecisions:
    """R5 on PostgreSQL."""

    def __init__(self, db: Postgres) -> None:
        self.db = db

    async def cas(
        self, conn: AsyncConnection, job_id: str, read_version: int, attempt_id: str, result: Any
    ) -> Any:
        """The compare-and-swap in ``conn``'s transaction; the decided job's row, or None."""
        params = (job_id, read_version, attempt_id, as_json(result), self.db.now())
        return (await conn.exec_driver_sql(PG_CAS, params)).one_or_none()

    def _params(
        self, attempt_id: str, result: Any, request_id: str | None, model: str | None
    ) -> tuple[Any, ...]:
        return (attempt_id, as_json(result), self.db.now(), fit(request_id), fit(model))

    async def finalize_alone(
        self, attempt_id: str, result: Any, request_id: str | None, model: str | None
    ) -> JobRecord | None:
        """The winning decision in one round trip: the decided job, or None: not won here."""
        params = self._params(attempt_id, result, request_id, model)
        records = await self.db.alone(FINALIZE_ALONE, params)
        if not records:
            return None
        decided = job_of(records)
        # This process's waiters; the statement sent the others' pg_notify itself.
        self.db.hub.publish_job(decided.id, decided)
        return decided

    async def finalize_locked(
        self,
        tx: WriteTx,
        attempt_id: str,
        result: Any,
        request_id: str | None,
        model: str | None,
    ) -> JobRecord | None:
        """The same decision in ``tx``, which holds the job's lock: None: not won."""
        params = self._params(attempt_id, result, request_id, model)
        found = await tx.conn.exec_driver_sql(FINALIZE_LOCKED, params)
        records = found.mappings().all()
        return job_of(records) if records else None


# -- SQLite ------------------------------------------------------------------------------------

#: R5's compare-and-swap on SQLite: the one place its guard is written.
SQLITE_CAS = (
    "UPDATE jobs SET status = 'succeeded', result = ?, error = NULL, completed_by = ?,"
    " version = version + 1, updated_at = ?"
    " WHERE id = ? AND version = ? AND completed_by IS NULL"
    f" RETURNING {', '.join(JOB_COLUMNS)}"
)
#: The running attempt, matched on its whole primary key (its owner read by its id): with
#: ``id`` alone SQLite took the ``(state, lease_expires_at)`` index (``by_attempt_id``).
SQLITE_RUNNING = (
    "SELECT job_id, read_version, owner_id FROM attempts WHERE id = ?"
    " AND owner_id = (SELECT mine.owner_id FROM attempts AS mine WHERE mine.id = ?)"
    " AND state = 'running'"
)
#: The winner's move to ``succeeded``.
SQLITE_FINISH = (
    "UPDATE attempts SET state = 'succeeded', finished_at = ?, provider_request_id = ?,"
    " reported_model = ? WHERE id = ? AND owner_id = ? AND state = 'running' RETURNING provider"
)
#: The winner's unsent siblings (a queued hedge, one waiting for capacity) cancelled.
SQLITE_CANCEL_UNSENT = (
    "UPDATE attempts SET state = 'cancelled', finished_at = ?, error = ?"
    f" WHERE job_id = ? AND state IN {UNSENT_SQL} RETURNING id"
)
SQLITE_ATTEMPTS = (
    f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM attempts WHERE job_id = ? ORDER BY number"
)


class SqliteDecisions:
    """R5 on SQLite."""

    def __init__(self, db: Sqlite) -> None:
        self.db = db

    def _cas_params(self, job_id: str, read_version: int, attempt_id: str, result: Any) -> Any:
        codec = self.db.codec
        now = codec.bind("jobs", "updated_at", self.db.now())
        return (codec.bind("jobs", "result", result), attempt_id, now, job_id, read_version)

    async def cas(
        self, conn: AsyncConnection, job_id: str, read_version: int, attempt_id: str, result: Any
    ) -> Any:
        """The compare-and-swap in ``conn``'s transaction; the decided job's row, or None."""
        params = self._cas_params(job_id, read_version, attempt_id, result)
        raw = (await conn.exec_driver_sql(SQLITE_CAS, params)).one_or_none()
        return None if raw is None else self.db.codec.job_row(raw)

    async def win(
        self, run: Run, attempt_id: str, result: Any, request_id: str | None, model: str | None
    ) -> JobRecord | None:
        """The winning decision's statements in ``run``'s write transaction (SQLite has one
        writer: nothing changes between them): the decided job, or None, with nothing
        written: the attempt is not running, or the CAS did not win."""
        codec = self.db.codec
        running = (await run(SQLITE_RUNNING, (attempt_id, attempt_id))).rows
        if not running:
            return None
        job_id, read_version = running[0][0], running[0][1]
        cas = self._cas_params(job_id, read_version, attempt_id, result)
        decided = (await run(SQLITE_CAS, cas)).rows
        if not decided:
            return None
        job_row = codec.job_row(decided[0])
        at = codec.bind("attempts", "finished_at", self.db.now())
        finish = (at, fit(request_id), fit(model), attempt_id, running[0][2])
        moved = (await run(SQLITE_FINISH, finish)).rows
        if not moved:  # cannot happen under the one writer; undo it all should it ever
            raise Stale
        now = self.db.now()
        detail = {"version": job_row.version, "provider": moved[0][0]}
        owner = job_row.owner_id
        events = [(job_id, attempt_id, "attempt_succeeded", scrub(detail), now, owner)]
        error = codec.bind("attempts", "error", {"reason": "job_decided_before_send"})
        unsent = (await run(SQLITE_CANCEL_UNSENT, (at, error, job_id))).rows
        events += [
            (job_id, row[0], "attempt_cancelled", {"why": "decided"}, now, owner) for row in unsent
        ]
        await run(insert_events_sql(len(events)), codec.event_params(events))
        siblings = [codec.attempt_row(a) for a in (await run(SQLITE_ATTEMPTS, (job_id,))).rows]
        return job_record(job_row, siblings)

    async def finalize_alone(
        self, attempt_id: str, result: Any, request_id: str | None, model: str | None
    ) -> JobRecord | None:
        """The winning decision in a write transaction of its own: the decided job, or
        None: not won."""
        async with self.db.statements() as run:
            decided = await self.win(run, attempt_id, result, request_id, model)
        if decided is not None:  # as ``Database.write`` does after its commit
            self.db.committed({decided.id: decided}, False)
        return decided

    async def finalize_locked(
        self,
        tx: WriteTx,
        attempt_id: str,
        result: Any,
        request_id: str | None,
        model: str | None,
    ) -> JobRecord | None:
        """The same decision in ``tx``: None: not won."""
        return await self.win(run_on(tx.conn), attempt_id, result, request_id, model)


Decisions = PostgresDecisions | SqliteDecisions


# -- both ----------------------------------------------------------------------------------


class Finalizing:
    """The store's R5 use case: ``finalize``, and the ``lose`` that ``resolve`` shares."""

    decisions: Decisions
    db: Database

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
            decided = await self.decisions.finalize_alone(
                attempt_id, result, provider_request_id, reported_model
            )
            if decided is not None:
                return won(attempt_id, decided)
            return await self._decide(attempt_id, result, provider_request_id, reported_model)
        except Stale:
            return FinalizeResult(FinalizeOutcome.STALE, attempt_id)

    async def _decide(
        self,
        attempt_id: str,
        result: Any,
        provider_request_id: str | None,
        reported_model: str | None,
    ) -> FinalizeResult:
        """Decide holding the job's lock: won (the same decision as alone), lost, or stale."""
        async with self.db.write_for_attempt(attempt_id) as found:
            if found is None:
                return FinalizeResult(FinalizeOutcome.STALE, attempt_id)
            tx, _ = found
            decided = await self.decisions.finalize_locked(
                tx, attempt_id, result, provider_request_id, reported_model
            )
            if decided is None:
                return await self._not_won(tx, attempt_id, result)
            tx.decided(decided)
            return won(attempt_id, decided)

    async def _not_won(self, tx: WriteTx, attempt_id: str, result: Any) -> FinalizeResult:
        """The decision found nothing to swap, the job locked: the attempt moved (stale),
        it lost the race, or its answer came again."""
        current = await tx.attempt_row(attempt_id)
        if current is not None and current.state == A.SUCCEEDED.value:
            # The same answer again: a try whose commit went through while its answer
            # was lost (a failover). The decision is this attempt's, taken once.
            decided = await tx.load(current.job_id)
            if decided is not None and (decided.completed_by, decided.result) == (
                attempt_id,
                result,
            ):
                return won(attempt_id, decided)
        if current is None or current.state != A.RUNNING.value:
            return FinalizeResult(FinalizeOutcome.STALE, attempt_id)
        lost = await lose(tx, current.job_id, attempt_id, [A.RUNNING])
        tx.decided(lost.job)
        return lost


async def lose(
    tx: WriteTx, job_id: str, attempt_id: str, sources: list[AttemptState]
) -> FinalizeResult:
    """Mark the attempt ``lost``, drop its payload, log and record the race."""
    row = await tx.move(attempt_id, sources, A.LOST, {"finished_at": tx.db.now()})
    if row is None:
        return FinalizeResult(FinalizeOutcome.STALE, attempt_id)
    job_row = (
        await tx.conn.execute(
            sa.select(jobs.c.completed_by, jobs.c.status, jobs.c.version).where(
                jobs.c.owner_id == await tx.owner_of(job_id), jobs.c.id == job_id
            )
        )
    ).one()
    detail = {
        "winner": job_row.completed_by,
        "job_status": job_row.status,
        "read_version": row.read_version,
        "job_version": job_row.version,
    }
    await tx.event(job_id, "race_lost", detail, attempt_id)
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
        job=await tx.load(job_id),
    )


def won(attempt_id: str, decided: JobRecord) -> FinalizeResult:
    """The result of a compare-and-swap this attempt won."""
    return FinalizeResult(
        FinalizeOutcome.WON,
        attempt_id,
        winner=attempt_id,
        job_status=JobStatus.SUCCEEDED,
        job=decided,
    )
