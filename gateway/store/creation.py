"""Creation (R2) and the reads of jobs, attempts and events."""

from __future__ import annotations

import datetime as dt
import logging
import types
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from gateway.domain.jsontext import scrub
from gateway.domain.records import (
    AttemptRecord,
    ClaimedAttempt,
    ClaimSpec,
    CreateOutcome,
    CreateResult,
    EventRecord,
    JobRecord,
    NewJob,
)
from gateway.domain.states import AttemptReason, AttemptState, JobStatus
from gateway.store import pg_round_trips as pg
from gateway.store import sqlite_round_trips as sq
from gateway.store.base import StoreBase
from gateway.store.rows import (
    MAX_LIST_LIMIT,
    A,
    attempt_record,
    aware_utc,
    decode_cursor,
    encode_cursor,
    hash_key,
    job_record,
    job_with,
)
from gateway.store.tables import attempts, job_events, jobs

log = logging.getLogger("onejob.store")


class CreationAndReads(StoreBase):
    """Create jobs (insert first, let the UNIQUE constraint decide) and read them."""

    async def create_or_get(self, new: NewJob, claim: ClaimSpec | None = None) -> CreateResult:
        """Insert the job, its first attempt and events; on a key clash replay or conflict.

        ``INSERT ... ON CONFLICT (owner_id, idempotency_key) DO NOTHING``: the UNIQUE
        constraint decides, with no read before the insert and no aborted transaction.
        With ``claim``, a new job's first attempt is inserted already claimed (``running``,
        leased to ``claim.worker_id``), so the creating process can run it at once.
        """
        now = self._now()
        job_id = self.ids.new("job")
        if self._sqlite:
            return await self._create_on_sqlite(new, job_id, now, claim)
        created = await self._create_in_one_statement(new, job_id, now, claim)
        if created is not None:
            return created
        replayed = await self._replay_in_one_statement(new, now)
        if replayed is not None:
            return replayed
        # Not visible yet (a concurrent first click still committing): a transaction of
        # its own reads it.
        async with self._tx() as tx:
            conn = tx.conn
            row = (
                await conn.execute(
                    sa.select(jobs).where(
                        jobs.c.owner_id == new.owner_id,
                        jobs.c.idempotency_key == new.idempotency_key,
                    )
                )
            ).one()
            existing = job_record(row, await self._attempt_rows(conn, row.id))
            if existing.fingerprint == new.fingerprint:
                await self._event(conn, existing.id, "replayed", {})
                return CreateResult(CreateOutcome.REPLAYED, existing)
            await self._event(conn, existing.id, "conflict", {"fingerprint": new.fingerprint})
            return CreateResult(CreateOutcome.CONFLICT, existing)

    async def _create_on_sqlite(
        self, new: NewJob, job_id: str, now: dt.datetime, claim: ClaimSpec | None
    ) -> CreateResult:
        """SQLite: the creating transaction's statements sent on the pooled connection
        (``sqlite_round_trips``): the job, and when the key was free its first attempt and
        events; when it was taken, the job it made and the ``replayed`` or ``conflict``
        event."""
        codec = self._sqlite_codec
        assert codec is not None
        job = _job_values(new, new.owner_id, job_id, now, claim)
        async with self._write_lock, sq.write_transaction(self.engine) as driver:
            cursor = await driver.execute(sq.INSERT_JOB, codec.params("jobs", job, sq.JOB_COLUMNS))
            if cursor.rowcount == 1:
                values, events = self._first_attempt(new, job_id, now, claim)
                await driver.execute(
                    sq.INSERT_ATTEMPT, codec.params("attempts", values, sq.ATTEMPT_COLUMNS)
                )
                rows = [(j, a, kind, scrub(detail), now) for j, kind, detail, a in events]
                await driver.execute(sq.insert_events_sql(len(rows)), codec.event_params(rows))
                outcome = _created(job, values, claim)
            else:
                cursor = await driver.execute(
                    sq.SELECT_JOB_BY_KEY, (new.owner_id, new.idempotency_key)
                )
                row, tried = codec.job_with_attempts(await cursor.fetchall())
                existing = job_record(row, tried)
                same = existing.fingerprint == new.fingerprint
                kind, detail = (
                    ("replayed", {}) if same else ("conflict", {"fingerprint": new.fingerprint})
                )
                await driver.execute(
                    sq.insert_events_sql(1),
                    codec.event_params([(row.id, None, kind, scrub(detail), now)]),
                )
                outcome = CreateResult(
                    CreateOutcome.REPLAYED if same else CreateOutcome.CONFLICT, existing
                )
        if claim is None and outcome.outcome is CreateOutcome.CREATED:
            self._committed({}, True)  # an unclaimed attempt needs a runner woken
        return outcome

    async def _create_for_key(
        self, secret: str, new: NewJob, claim: ClaimSpec | None
    ) -> CreateResult | None:
        """PostgreSQL: ``create_or_get`` for the owner of the API key ``secret``, the key
        checked by the same statement (``pg.CREATE_BY_KEY``; ``new.owner_id`` unused).

        None when that statement cannot tell: the key is unknown or revoked, or the key's
        owner already has a job under this idempotency key that the statement's snapshot
        does not see yet (a concurrent first click still committing).
        """
        return await self._create_in_one_statement(
            new, self.ids.new("job"), self._now(), claim, key_hash=hash_key(secret)
        )

    def _first_attempt(
        self, new: NewJob, job_id: str, now: dt.datetime, claim: ClaimSpec | None
    ) -> tuple[dict[str, Any], list[tuple[str, str, dict[str, Any], str | None]]]:
        """Return attempt 1's columns (claimed when asked) and the creation events."""
        attempt_id = self.ids.new("att")
        values: dict[str, Any] = {
            "id": attempt_id,
            "job_id": job_id,
            "number": 1,
            "provider": new.provider,
            "reason": AttemptReason.INITIAL.value,
            "state": A.STARTING.value,
            "read_version": None,
            "lease_owner": None,
            "lease_expires_at": None,
            "deadline_at": None,
            "downstream_key": f"{job_id}/1",
            "created_at": now,
            "started_at": None,
        }
        created = {"number": 1, "provider": new.provider, "reason": AttemptReason.INITIAL.value}
        events: list[tuple[str, str, dict[str, Any], str | None]] = [
            (job_id, "job_created", {"contract": new.contract, "provider": new.provider}, None),
            (job_id, "attempt_created", created, attempt_id),
        ]
        if claim is not None:
            values.update(
                state=A.RUNNING.value,
                read_version=1,
                lease_owner=claim.worker_id,
                lease_expires_at=now + dt.timedelta(seconds=claim.lease_ttl),
                deadline_at=now + dt.timedelta(seconds=claim.deadline_s),
                started_at=now,
            )
            running = {"worker": claim.worker_id, "read_version": 1, "in_process": True}
            events.append((job_id, "attempt_running", running, attempt_id))
        return values, events

    async def _create_in_one_statement(
        self,
        new: NewJob,
        job_id: str,
        now: dt.datetime,
        claim: ClaimSpec | None,
        key_hash: str | None = None,
    ) -> CreateResult | None:
        """PostgreSQL: insert job, attempt and events in one statement, outside a
        transaction, or return the job the key already made; None when that job is not
        visible (the caller replays or conflicts), or with ``key_hash`` when that API
        key is not valid (the job is the key's owner's)."""
        values, events = self._first_attempt(new, job_id, now, claim)
        sql = pg.CREATE if key_hash is None else pg.CREATE_BY_KEY
        params = (
            job_id,
            new.owner_id if key_hash is None else key_hash,
            new.idempotency_key,
            new.fingerprint,
            new.contract,
            new.provider,
            new.requested_provider,
            pg.as_checked_json(new.input),
            (JobStatus.RUNNING if claim else JobStatus.QUEUED).value,
            now,
            values["id"],
            values["state"],
            values["read_version"],
            values["lease_owner"],
            values["lease_expires_at"],
            values["deadline_at"],
            values["started_at"],
            [attempt for _, _, _, attempt in events],
            [kind for _, kind, _, _ in events],
            [pg.as_checked_json(scrub(detail)) for _, _, detail, _ in events],
        )
        meanwhile = claim.meanwhile if claim is not None else None
        try:
            if key_hash is not None and self._creations is not None:
                records = await self._creations.create(params, meanwhile)  # or with others
            else:
                async with pg.checkout(self.engine, sql, self._kept) as driver:
                    records = await pg.fetch(driver, sql, params, meanwhile)
        except BaseException:
            if claim is not None:
                # No answer, so the claim is not handed out: if the job was created
                # after all, its attempt was never sent, and goes back in the queue.
                self.never_sent(values["id"], claim.worker_id)
            raise
        if not records:
            return None
        record = records[0]
        if not record["created"]:
            return _existing(records, new)
        if claim is None:
            self._committed({}, True)  # an unclaimed attempt needs a runner woken
        # The row holds only the owner (the key's): the rest is what was just inserted.
        return _created(_job_values(new, record["j_owner_id"], job_id, now, claim), values, claim)

    async def _replay_in_one_statement(self, new: NewJob, now: dt.datetime) -> CreateResult | None:
        """PostgreSQL: the key is taken; read its job and audit the replay or conflict."""
        sql = pg.REPLAY
        params = (new.owner_id, new.idempotency_key, new.fingerprint, now)
        async with pg.checkout(self.engine, sql, self._kept) as driver:
            records = await driver.fetch(sql, *params)
        if not records:
            return None
        return _existing(records, new)

    async def get_job(self, job_id: str, owner_id: str | None = None) -> JobRecord | None:
        """Load a job with its attempts (``owner_id`` None: any owner)."""
        async with self._read() as conn:
            return await self._load(conn, job_id, owner_id)

    async def list_jobs(
        self, owner_id: str, *, status: JobStatus | None, limit: int, cursor: str | None
    ) -> tuple[list[JobRecord], str | None]:
        """List an owner's jobs newest first (ids are time-ordered ULIDs)."""
        limit = max(1, min(limit, MAX_LIST_LIMIT))
        # PostgreSQL's listing indexes compare the owner under "C" (migration 0004).
        owner = jobs.c.owner_id if self._sqlite else jobs.c.owner_id.collate("C")
        query = sa.select(jobs).where(owner == owner_id)
        if status is not None:
            query = query.where(jobs.c.status == status.value)
        after = decode_cursor(cursor) if cursor is not None else None
        if after is not None:
            query = query.where(jobs.c.id < after)
        query = query.order_by(jobs.c.id.desc()).limit(limit + 1)
        async with self._read() as conn:
            if after is not None:
                # A cursor names a job of this owner's list; a made-up one is refused,
                # not answered with an empty page that looks like the end.
                mine = sa.select(jobs.c.id).where(jobs.c.id == after, jobs.c.owner_id == owner_id)
                if (await conn.execute(mine)).first() is None:
                    raise ValueError("invalid cursor")
            rows = (await conn.execute(query)).all()
            page = rows[:limit]
            ids = [r.id for r in page]
            attempt_rows = (
                (
                    await conn.execute(
                        sa.select(attempts)
                        .where(attempts.c.job_id.in_(ids))
                        .order_by(attempts.c.job_id, attempts.c.number)
                    )
                ).all()
                if ids
                else []
            )
        by_job: dict[str, list[Any]] = {}
        for a in attempt_rows:
            by_job.setdefault(a.job_id, []).append(a)
        result = [job_record(r, by_job.get(r.id, [])) for r in page]
        next_cursor = encode_cursor(page[-1].id) if len(rows) > limit else None
        return result, next_cursor

    async def get_attempt(self, attempt_id: str) -> AttemptRecord | None:
        """Load one attempt by id (any owner)."""
        async with self._read() as conn:
            row = await self._attempt_row(conn, attempt_id)
        return None if row is None else attempt_record(row)

    async def list_attempts(
        self, state: AttemptState | None, *, limit: int = 100
    ) -> list[AttemptRecord]:
        """List attempts in a state, all owners, oldest first."""
        query = sa.select(attempts).order_by(attempts.c.created_at, attempts.c.id)
        if state is not None:
            query = query.where(attempts.c.state == state.value)
        async with self._read() as conn:
            rows = (await conn.execute(query.limit(max(1, min(limit, 1000))))).all()
        return [attempt_record(r) for r in rows]

    async def count_attempts(self, state: AttemptState) -> int:
        """Count attempts in ``state`` (for the metrics gauge)."""
        async with self._read() as conn:
            return int(
                (
                    await conn.execute(
                        sa.select(sa.func.count()).where(attempts.c.state == state.value)
                    )
                ).scalar_one()
            )

    async def events(self, job_id: str) -> list[EventRecord]:
        """Return a job's audit trail, oldest first."""
        async with self._read() as conn:
            rows = (
                await conn.execute(
                    sa.select(job_events)
                    .where(job_events.c.job_id == job_id)
                    .order_by(job_events.c.id)
                )
            ).all()
        return [
            EventRecord(
                id=r.id,
                job_id=r.job_id,
                attempt_id=r.attempt_id,
                kind=r.kind,
                detail=r.detail,
                at=aware_utc(r.at),  # type: ignore[arg-type]
            )
            for r in rows
        ]

    async def record_event(
        self, job_id: str, kind: str, detail: dict[str, Any], attempt_id: str | None = None
    ) -> None:
        """Append an audit event on its own (e.g. a refused request)."""
        async with self._tx() as tx:
            await self._event(tx.conn, job_id, kind, detail, attempt_id)


def _job_values(
    new: NewJob, owner_id: str, job_id: str, now: dt.datetime, claim: ClaimSpec | None
) -> dict[str, Any]:
    """Return the columns a new job is inserted with."""
    return {
        "id": job_id,
        "owner_id": owner_id,
        "idempotency_key": new.idempotency_key,
        "fingerprint": new.fingerprint,
        "contract": new.contract,
        "provider": new.provider,
        "requested_provider": new.requested_provider,
        "input": new.input,
        "status": (JobStatus.RUNNING if claim else JobStatus.QUEUED).value,
        "version": 1,
        "created_at": now,
        "updated_at": now,
    }


#: The columns a creation leaves NULL (its values dicts do not name them).
_JOB_NULLS = dict.fromkeys(sq.JOB_COLUMNS)
_ATTEMPT_NULLS = dict.fromkeys(sq.ATTEMPT_COLUMNS)


def _created(job: dict[str, Any], attempt: dict[str, Any], claim: ClaimSpec | None) -> CreateResult:
    """A job just created, from the values it and its first attempt were inserted with
    (the database adds none: nothing to read back).

    A claimed attempt's job comes without attempts, as from a claim: built from the row,
    not by ``dataclasses.replace`` of the other (10-12 us alone). A creation's records
    took 45 us, 7 % of its CPU, before this and the faster ``rows`` conversions; 26 us
    after (docs/benchmarks.md, seventeenth session).
    """
    row = types.SimpleNamespace(**{**_JOB_NULLS, **job})
    first = attempt_record(types.SimpleNamespace(**{**_ATTEMPT_NULLS, **attempt}))
    claimed = ClaimedAttempt(first, job_with(row, ())) if claim is not None else None
    return CreateResult(CreateOutcome.CREATED, job_with(row, (first,)), claimed)


def _existing(records: Sequence[Any], new: NewJob) -> CreateResult:
    """The job a taken key made, from a row per attempt: a replay, or a conflict."""
    existing = pg.job_of(records)
    if existing.fingerprint == new.fingerprint:
        return CreateResult(CreateOutcome.REPLAYED, existing)
    return CreateResult(CreateOutcome.CONFLICT, existing)
