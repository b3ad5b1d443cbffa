"""Creation (R2): insert first, let the UNIQUE constraint decide; a taken key replays.

``INSERT ... ON CONFLICT (owner_id, idempotency_key) DO NOTHING``: no read before the insert
decides anything and no transaction aborts. A new job comes with its first attempt and
their events; with a ``ClaimSpec`` that attempt is inserted already claimed (``running``,
leased to the creating process), so that process can run it at once (R7). A key already
taken returns its job: the same fingerprint is a replay, another a conflict, and either is
audited in the same statement or transaction.

Each database has its statements here, side by side, and its way of sending them:

- PostgreSQL (``PostgresCreation``): the whole creating transaction is one statement with
  data-modifying CTEs, sent outside a transaction (``Database.alone``): one round trip
  instead of five. When the key is taken by a job the statement's snapshot sees, it
  returns that job and writes its event too; when it cannot tell (a concurrent first click
  still committing) ``REPLAY`` reads it, then a transaction of its own. With the
  ``creation_batches`` shortcut, creations that arrive while one is on the wire go
  together, in the batch statement that module keeps (``creation_batches``).
- SQLite (``SqliteCreation``): no data-modifying CTEs, so a transaction of a few
  statements, under the process's write lock (``Database.statements``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import types
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import sqlalchemy as sa

from gateway.domain.jsontext import scrub
from gateway.domain.records import (
    ClaimedAttempt,
    ClaimSpec,
    CreateOutcome,
    CreateResult,
    JobRecord,
    NewJob,
    Principal,
)
from gateway.domain.states import AttemptReason, JobStatus
from gateway.store.claim import UnsentClaims
from gateway.store.database import Postgres, Sqlite
from gateway.store.events import insert_events_sql
from gateway.store.rows import (
    ATTEMPT_COLUMNS,
    JOB_COLUMNS,
    A,
    as_checked_json,
    attempt_record,
    hash_key,
    job_of,
    job_record,
    job_with,
    prefixed,
)
from gateway.store.tables import jobs

log = logging.getLogger("onejob.store")

# -- PostgreSQL: the creating transaction as one statement ----------------------------------

#: The columns a creation inserts a job and its first attempt with (one job, or a batch).
INSERT_JOB = (
    "INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, contract, provider,"
    " requested_provider, input, status, version, created_at, updated_at, deadline_at,"
    " traceparent, tracestate)"
)
INSERT_ATTEMPT = (
    "INSERT INTO attempts (id, job_id, number, provider, reason, state, read_version,"
    " lease_owner, lease_expires_at, deadline_at, downstream_key, created_at, started_at,"
    " ready_at, owner_id)"
)


def owner_only(owner: str) -> str:
    """The ``j_``/``a_`` columns of a created job's row: its owner, NULL for the rest (the
    caller has every other value: it just sent them)."""
    return ", ".join(
        [f"{owner} AS j_owner_id" if c == "owner_id" else f"NULL AS j_{c}" for c in JOB_COLUMNS]
        + [f"NULL AS a_{c}" for c in ATTEMPT_COLUMNS]
    )


def key_taken_event(job: str, fingerprint: str, now: str) -> str:
    """The audit of a key already taken: ``replayed`` (same fingerprint) or ``conflict``."""
    return f"""INSERT INTO job_events (job_id, owner_id, attempt_id, kind, detail, at)
  SELECT {job}.id, {job}.owner_id, NULL,
         CASE WHEN {job}.fingerprint = {fingerprint} THEN 'replayed' ELSE 'conflict' END,
         CASE WHEN {job}.fingerprint = {fingerprint} THEN '{{}}'::jsonb
              ELSE jsonb_build_object('fingerprint', {fingerprint}::text) END,
         {now}
  FROM {job}"""


def _create(by_key: bool) -> str:
    # by_key: $2 is the caller's API key hash, not an owner. The key is read in the same
    # snapshot, and the job is its owner's; an unknown or revoked key inserts nothing.
    key = (
        "key AS (\n  SELECT owner_id FROM api_keys WHERE key_hash = $2 AND revoked_at IS NULL\n), "
        if by_key
        else ""
    )
    owner, from_key, and_key = ("key.owner_id", " FROM key", ", key") if by_key else ("$2", "", "")
    return f"""
WITH {key}job AS (
  {INSERT_JOB}
  SELECT $1, {owner}, $3, $4, $5, $6, $7, $8::jsonb, $9, 1, $10, $10, $18::timestamp,
         $20, $21{from_key}
  ON CONFLICT (owner_id, idempotency_key) DO NOTHING
  RETURNING *
), attempt AS (
  {INSERT_ATTEMPT}
  SELECT $11, job.id, 1, job.provider, 'initial', $12, $13, $14, $15, $16,
         job.id || '/1', $10, $17, $19::timestamp, job.owner_id
  FROM job
  RETURNING *
), events AS (
  INSERT INTO job_events (job_id, owner_id, attempt_id, kind, detail, at)
  SELECT attempt.job_id, attempt.owner_id, e.attempt_id, e.kind, e.detail, $10
  FROM attempt, unnest($22::varchar[], $23::varchar[], $24::jsonb[]) AS e(attempt_id, kind, detail)
), old AS (
  SELECT jobs.* FROM jobs{and_key}
  WHERE jobs.owner_id = {owner} AND jobs.idempotency_key = $3
    AND NOT EXISTS (SELECT 1 FROM job)
), old_event AS (
  {key_taken_event("old", "$4", "$10")}
)
SELECT true AS created, {owner_only("job.owner_id")}
FROM job, attempt
UNION ALL
SELECT false, {prefixed("old", "j_", JOB_COLUMNS)}, {prefixed("a", "a_", ATTEMPT_COLUMNS)}
FROM old LEFT JOIN attempts AS a ON a.owner_id = old.owner_id AND a.job_id = old.id
ORDER BY a_number"""


#: Creation (an unclaimed attempt's wake-up goes after the commit: ``pg_wakeups``). A
#: created job's row holds its owner only (``_owner_only``). When the key is taken by a
#: job this statement's snapshot sees, the same round trip returns that job (``created``
#: false, a row per attempt) and writes its ``replayed`` or ``conflict`` event, so a
#: replay costs one round trip as a creation does. No row: the key's job is not visible
#: yet (a concurrent first click committing); ``REPLAY`` reads it.
CREATE = _create(by_key=False)
#: The same, for the owner of the API key whose hash is ``$2``: checking the key costs no
#: round trip of its own. No row also when the key is unknown or revoked.
CREATE_BY_KEY = _create(by_key=True)

#: The key is taken: read the job and its attempts and write the ``replayed`` (same
#: fingerprint) or ``conflict`` event, in one statement with one snapshot. A row per
#: attempt, the job's columns repeated; none when no such job is visible.
REPLAY = f"""
WITH job AS (
  SELECT * FROM jobs WHERE owner_id = $1 AND idempotency_key = $2
), event AS (
  {key_taken_event("job", "$3", "$4")}
)
SELECT {prefixed("job", "j_", JOB_COLUMNS)}, {prefixed("a", "a_", ATTEMPT_COLUMNS)}
FROM job LEFT JOIN attempts AS a ON a.owner_id = job.owner_id AND a.job_id = job.id
ORDER BY a.number"""

# -- SQLite: the same as a transaction of statements ----------------------------------------

#: The job, if its key is free (the UNIQUE constraint decides).
SQLITE_INSERT_JOB = (
    f"INSERT INTO jobs ({', '.join(JOB_COLUMNS)}) VALUES ({', '.join('?' * len(JOB_COLUMNS))})"
    " ON CONFLICT (owner_id, idempotency_key) DO NOTHING"
)
#: Its first attempt.
SQLITE_INSERT_ATTEMPT = (
    f"INSERT INTO attempts ({', '.join(ATTEMPT_COLUMNS)})"
    f" VALUES ({', '.join('?' * len(ATTEMPT_COLUMNS))})"
)
#: The job an owner's key made and its attempts, oldest first: a row per attempt, the
#: job's columns repeated (``Codec.job_with_attempts`` reads it).
SQLITE_JOB_BY_KEY = (
    f"SELECT {', '.join('j.' + c for c in JOB_COLUMNS)},"
    f" {', '.join('a.' + c for c in ATTEMPT_COLUMNS)}"
    " FROM jobs AS j LEFT JOIN attempts AS a ON a.owner_id = j.owner_id AND a.job_id = j.id"
    " WHERE j.owner_id = ? AND j.idempotency_key = ? ORDER BY a.number"
)


# -- the values a creation writes ---------------------------------------------------------


def first_attempt(
    new: NewJob, job_id: str, now: dt.datetime, claim: ClaimSpec | None, attempt_id: str
) -> tuple[dict[str, Any], list[tuple[str, str, dict[str, Any], str | None]]]:
    """Return attempt 1's columns (claimed when asked) and the creation events."""
    values: dict[str, Any] = {
        "id": attempt_id,
        "job_id": job_id,
        "owner_id": new.owner_id,
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
        # Its place in the claim queue (its owner's fair share: ``NewJob.queue_delay_s``).
        "ready_at": now + dt.timedelta(seconds=new.queue_delay_s) if new.queue_delay_s else now,
        "waits": 0,
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


def job_deadline(new: NewJob, now: dt.datetime) -> dt.datetime | None:
    """When nothing more is sent for a job created ``now`` (None: no deadline)."""
    return None if new.deadline_s is None else now + dt.timedelta(seconds=new.deadline_s)


def job_values(
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
        "deadline_at": job_deadline(new, now),
        "traceparent": new.traceparent,
        "tracestate": new.tracestate,
    }


#: The columns a creation leaves NULL (its values dicts do not name them).
_JOB_NULLS = dict.fromkeys(JOB_COLUMNS)
_ATTEMPT_NULLS = dict.fromkeys(ATTEMPT_COLUMNS)


def created(job: dict[str, Any], attempt: dict[str, Any], claim: ClaimSpec | None) -> CreateResult:
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


def key_taken(job: JobRecord, new: NewJob) -> tuple[CreateResult, str, dict[str, Any]]:
    """R2 when ``new``'s key already made ``job``: the same fingerprint replays it, another
    is a conflict; with the audit event each writes (its kind and detail). The one place
    Python decides it; PostgreSQL's statements decide it in SQL (``key_taken_event``)."""
    if job.fingerprint == new.fingerprint:
        return CreateResult(CreateOutcome.REPLAYED, job), "replayed", {}
    detail = {"fingerprint": new.fingerprint}
    return CreateResult(CreateOutcome.CONFLICT, job), "conflict", detail


def existing(records: Sequence[Any], new: NewJob) -> CreateResult:
    """The job a taken key made, from a row per attempt (its event written in SQL)."""
    return key_taken(job_of(records), new)[0]


# -- how each database creates ------------------------------------------------------------


class PostgresCreation:
    """Create on PostgreSQL: one statement (module docstring)."""

    def __init__(self, db: Postgres, unsent: UnsentClaims, batches: Batches | None) -> None:
        self.db = db
        self.unsent = unsent
        #: The ``creation_batches`` shortcut: keyed creations go through it.
        self.batches = batches

    async def create_or_get(self, new: NewJob, claim: ClaimSpec | None) -> CreateResult:
        """Create ``new`` as its owner's, or return the job its key made."""
        now = self.db.now()
        made = await self.create(new, self.db.ids.new("job"), now, claim)
        if made is not None:
            return made
        replayed = await self.replay(new, now)
        if replayed is not None:
            return replayed
        # Not visible yet (a concurrent first click still committing): a transaction of
        # its own reads it.
        async with self.db.write() as tx:
            row = (
                await tx.conn.execute(
                    sa.select(jobs).where(
                        jobs.c.owner_id == new.owner_id,
                        jobs.c.idempotency_key == new.idempotency_key,
                    )
                )
            ).one()
            tx.owners[row.id] = row.owner_id
            outcome, kind, detail = key_taken(job_record(row, await tx.attempt_rows(row.id)), new)
            await tx.event(row.id, kind, detail)
            return outcome

    async def create_for_key(
        self, secret: str, new: NewJob, claim: ClaimSpec | None
    ) -> CreateResult | None:
        """Create ``new`` for the owner of the API key ``secret``, the key checked by the
        same statement (``CREATE_BY_KEY``; ``new.owner_id`` unused).

        None when that statement cannot tell: the key is unknown or revoked, or the key's
        owner already has a job under this idempotency key that the statement's snapshot
        does not see yet (a concurrent first click still committing).
        """
        job_id, now = self.db.ids.new("job"), self.db.now()
        return await self.create(new, job_id, now, claim, key_hash=hash_key(secret))

    async def create(
        self,
        new: NewJob,
        job_id: str,
        now: dt.datetime,
        claim: ClaimSpec | None,
        key_hash: str | None = None,
    ) -> CreateResult | None:
        """Send the creating statement; None when the key's job is not visible (the caller
        replays or conflicts), or with ``key_hash`` when that API key is not valid."""
        values, events = first_attempt(new, job_id, now, claim, self.db.ids.new("att"))
        sql = CREATE if key_hash is None else CREATE_BY_KEY
        params = (
            job_id,
            new.owner_id if key_hash is None else key_hash,
            new.idempotency_key,
            new.fingerprint,
            new.contract,
            new.provider,
            new.requested_provider,
            as_checked_json(new.input),
            (JobStatus.RUNNING if claim else JobStatus.QUEUED).value,
            now,
            values["id"],
            values["state"],
            values["read_version"],
            values["lease_owner"],
            values["lease_expires_at"],
            values["deadline_at"],
            values["started_at"],
            job_deadline(new, now),
            values["ready_at"],
            new.traceparent,
            new.tracestate,
            [attempt for _, _, _, attempt in events],
            [kind for _, kind, _, _ in events],
            [as_checked_json(scrub(detail)) for _, _, detail, _ in events],
        )
        meanwhile = claim.meanwhile if claim is not None else None
        try:
            if key_hash is not None and self.batches is not None:
                records = await self.batches.create(params, meanwhile)  # or with others
            else:
                records = await self.db.alone(sql, params, meanwhile=meanwhile)
        except BaseException:
            if claim is not None:
                # No answer, so the claim is not handed out: if the job was created
                # after all, its attempt was never sent, and goes back in the queue.
                self.unsent.record(values["id"], claim.worker_id, values["started_at"])
            raise
        if not records:
            return None
        record = records[0]
        if not record["created"]:
            return existing(records, new)
        if claim is None:
            self.db.committed({}, True)  # an unclaimed attempt needs a runner woken
        # The row holds only the owner (the key's): the rest is what was just inserted.
        values["owner_id"] = owner = record["j_owner_id"]
        return created(job_values(new, owner, job_id, now, claim), values, claim)

    async def replay(self, new: NewJob, now: dt.datetime) -> CreateResult | None:
        """The key is taken: read its job and audit the replay or conflict."""
        params = (new.owner_id, new.idempotency_key, new.fingerprint, now)
        records = await self.db.alone(REPLAY, params)
        return existing(records, new) if records else None

    async def close(self) -> None:
        """Finish the creations on the wire."""
        if self.batches is not None:
            await self.batches.close()


class SqliteCreation:
    """Create on SQLite: a transaction of statements (module docstring)."""

    def __init__(
        self, db: Sqlite, authenticate: Callable[[str], Awaitable[Principal | None]]
    ) -> None:
        self.db = db
        self.authenticate = authenticate

    async def create_or_get(self, new: NewJob, claim: ClaimSpec | None) -> CreateResult:
        """The job, and when the key was free its first attempt and events; when it was
        taken, the job it made and the ``replayed`` or ``conflict`` event."""
        codec = self.db.codec
        now, job_id = self.db.now(), self.db.ids.new("job")
        job = job_values(new, new.owner_id, job_id, now, claim)
        async with self.db.statements() as run:
            ran = await run(SQLITE_INSERT_JOB, codec.params("jobs", job, JOB_COLUMNS))
            if ran.rowcount == 1:
                values, events = first_attempt(new, job_id, now, claim, self.db.ids.new("att"))
                await run(SQLITE_INSERT_ATTEMPT, codec.params("attempts", values, ATTEMPT_COLUMNS))
                rows = [(j, a, k, scrub(d), now, new.owner_id) for j, k, d, a in events]
                await run(insert_events_sql(len(rows)), codec.event_params(rows))
                outcome = created(job, values, claim)
            else:
                ran = await run(SQLITE_JOB_BY_KEY, (new.owner_id, new.idempotency_key))
                row, tried = codec.job_with_attempts(ran.rows)
                outcome, kind, detail = key_taken(job_record(row, tried), new)
                event = [(row.id, None, kind, scrub(detail), now, row.owner_id)]
                await run(insert_events_sql(1), codec.event_params(event))
        if claim is None and outcome.outcome is CreateOutcome.CREATED:
            self.db.committed({}, True)  # an unclaimed attempt needs a runner woken
        return outcome

    async def create_for_key(
        self, secret: str, new: NewJob, claim: ClaimSpec | None
    ) -> CreateResult | None:
        """Read the API key first (a local read costs no round trip), then create."""
        principal = await self.authenticate(secret)
        if principal is None:
            return None
        return await self.create_or_get(
            dataclasses.replace(new, owner_id=principal.owner_id), claim
        )

    async def close(self) -> None:
        """Nothing is on the wire between calls."""


Creation = PostgresCreation | SqliteCreation


class Batches(Protocol):
    """Creations sent together (``creation_batches.CreationBatcher``)."""

    async def create(
        self, params: tuple[Any, ...], meanwhile: Callable[[], None] | None = None
    ) -> list[Any]:
        """Create one job (``CREATE_BY_KEY``'s parameters); return its rows."""
        ...

    async def close(self) -> None:
        """Finish the creations on the wire."""
        ...


class Creating:
    """The store's creation use cases (``JobStore.create_or_get`` and ``create_or_get_for_key``)."""

    creation: Creation

    async def create_or_get(self, new: NewJob, claim: ClaimSpec | None = None) -> CreateResult:
        """Insert the job, its first attempt and events; on a key clash replay or conflict."""
        return await self.creation.create_or_get(new, claim)

    async def create_or_get_for_key(
        self, secret: str, new: NewJob, claim: ClaimSpec | None = None
    ) -> CreateResult | None:
        """``create_or_get`` for the owner of the API key ``secret``.

        None: the key is unknown or revoked, or (PostgreSQL) the key's job is not visible
        yet; the caller reads the key and creates without it.
        """
        return await self.creation.create_for_key(secret, new, claim)
