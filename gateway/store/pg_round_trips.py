"""PostgreSQL: the hot transactions as single statements, sent straight through asyncpg.

Creating a job (job, first attempt, its events), or replaying the one the key already
made, is one statement with data-modifying CTEs, run on its own (no BEGIN, no COMMIT):
one round trip instead of five. The winning compare-and-swap (job, attempt, unsent
siblings, events, ``pg_notify``) is one statement too, returning the decided job with its
attempts: one round trip instead of four. SQLite has no data-modifying CTEs and no
network round trips; it keeps the statements in ``statements``.

The SQL is plain text with ``$n`` parameters, built once from the table definitions, and
asyncpg prepares and caches it per connection. JSON parameters are passed as text, as the
codecs SQLAlchemy installs on each asyncpg connection expect.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import types
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import msgspec
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import PoolProxiedConnection, QueuePool
from sqlalchemy.util.concurrency import greenlet_spawn

from gateway.domain.records import JobRecord
from gateway.notify import JOBS_CHANNEL
from gateway.store.engine import IDLE_PING_AFTER, IDLE_SINCE, pooled_connection
from gateway.store.pg_connections import terminate
from gateway.store.rows import job_record
from gateway.store.tables import attempts, jobs

JOB_COLUMNS = [c.name for c in jobs.c]
ATTEMPT_COLUMNS = [c.name for c in attempts.c]


def _select(alias: str, prefix: str, columns: Sequence[str]) -> str:
    return ", ".join(f"{alias}.{c} AS {prefix}{c}" for c in columns)


#: The columns a creation inserts a job and its first attempt with (one job, or a batch).
_INSERT_JOB = (
    "INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, contract, provider,"
    " requested_provider, input, status, version, created_at, updated_at)"
)
_INSERT_ATTEMPT = (
    "INSERT INTO attempts (id, job_id, number, provider, reason, state, read_version,"
    " lease_owner, lease_expires_at, deadline_at, downstream_key, created_at, started_at)"
)


def _owner_only(owner: str) -> str:
    """The ``j_``/``a_`` columns of a created job's row: its owner, NULL for the rest (the
    caller has every other value: it just sent them)."""
    return ", ".join(
        [f"{owner} AS j_owner_id" if c == "owner_id" else f"NULL AS j_{c}" for c in JOB_COLUMNS]
        + [f"NULL AS a_{c}" for c in ATTEMPT_COLUMNS]
    )


def _key_taken_event(job: str, fingerprint: str, now: str) -> str:
    """The audit of a key already taken: ``replayed`` (same fingerprint) or ``conflict``."""
    return f"""INSERT INTO job_events (job_id, attempt_id, kind, detail, at)
  SELECT {job}.id, NULL,
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
  {_INSERT_JOB}
  SELECT $1, {owner}, $3, $4, $5, $6, $7, $8::jsonb, $9, 1, $10, $10{from_key}
  ON CONFLICT (owner_id, idempotency_key) DO NOTHING
  RETURNING *
), attempt AS (
  {_INSERT_ATTEMPT}
  SELECT $11, job.id, 1, job.provider, 'initial', $12, $13, $14, $15, $16,
         job.id || '/1', $10, $17
  FROM job
  RETURNING *
), events AS (
  INSERT INTO job_events (job_id, attempt_id, kind, detail, at)
  SELECT attempt.job_id, e.attempt_id, e.kind, e.detail, $10
  FROM attempt, unnest($18::varchar[], $19::varchar[], $20::jsonb[]) AS e(attempt_id, kind, detail)
), old AS (
  SELECT jobs.* FROM jobs{and_key}
  WHERE jobs.owner_id = {owner} AND jobs.idempotency_key = $3
    AND NOT EXISTS (SELECT 1 FROM job)
), old_event AS (
  {_key_taken_event("old", "$4", "$10")}
)
SELECT true AS created, {_owner_only("job.owner_id")}
FROM job, attempt
UNION ALL
SELECT false, {_select("old", "j_", JOB_COLUMNS)}, {_select("a", "a_", ATTEMPT_COLUMNS)}
FROM old LEFT JOIN attempts AS a ON a.job_id = old.id
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

#: ``CREATE_BY_KEY`` for several jobs in one statement and one commit
#: (``pg_creations``): $1-$17 are arrays, one element per job, of ``CREATE_BY_KEY``'s $1-$17;
#: $18-$21 the events of all of them, each with its job's position (from 1). A row per
#: job created, and per attempt of a job whose key was taken and is visible, each with
#: its job's position ``n``; none for a job the statement cannot tell (an unknown key,
#: or the key's job not visible yet: a job of the same batch, say).
#:
#: The jobs are inserted in (owner, idempotency key) order: two batches that share keys
#: (a double click split between them) take the keys' index locks in one order, so
#: neither waits for the other in a cycle.
CREATE_BY_KEY_BATCH = f"""
WITH input AS (
  SELECT * FROM unnest($1::varchar[], $2::varchar[], $3::varchar[], $4::varchar[],
                       $5::varchar[], $6::varchar[], $7::varchar[], $8::jsonb[],
                       $9::varchar[], $10::timestamp[], $11::varchar[], $12::varchar[],
                       $13::int[], $14::varchar[], $15::timestamp[], $16::timestamp[],
                       $17::timestamp[])
    WITH ORDINALITY AS i(job_id, key_hash, idempotency_key, fingerprint, contract,
                         provider, requested_provider, input, status, at, attempt_id,
                         state, read_version, lease_owner, lease_expires_at, deadline_at,
                         started_at, n)
), key AS (
  SELECT i.n, k.owner_id FROM input AS i CROSS JOIN LATERAL (
    SELECT owner_id FROM api_keys WHERE key_hash = i.key_hash AND revoked_at IS NULL OFFSET 0
  ) AS k
), job AS (
  {_INSERT_JOB}
  SELECT i.job_id, key.owner_id, i.idempotency_key, i.fingerprint, i.contract, i.provider,
         i.requested_provider, i.input, i.status, 1, i.at, i.at
  FROM input AS i JOIN key ON key.n = i.n
  ORDER BY key.owner_id, i.idempotency_key
  ON CONFLICT (owner_id, idempotency_key) DO NOTHING
  RETURNING *
), attempt AS (
  {_INSERT_ATTEMPT}
  SELECT i.attempt_id, job.id, 1, job.provider, 'initial', i.state, i.read_version,
         i.lease_owner, i.lease_expires_at, i.deadline_at, job.id || '/1', i.at, i.started_at
  FROM job JOIN input AS i ON i.job_id = job.id
  RETURNING *
), events AS (
  INSERT INTO job_events (job_id, attempt_id, kind, detail, at)
  SELECT attempt.job_id, e.attempt_id, e.kind, e.detail, i.at
  FROM unnest($18::int[], $19::varchar[], $20::varchar[], $21::jsonb[])
         WITH ORDINALITY AS e(n, attempt_id, kind, detail, k)
  JOIN input AS i ON i.n = e.n JOIN attempt ON attempt.job_id = i.job_id
  ORDER BY e.k
), old AS (
  SELECT i.n, i.fingerprint AS asked, i.at AS asked_at, taken.*
  FROM input AS i JOIN key ON key.n = i.n CROSS JOIN LATERAL (
    SELECT * FROM jobs
    WHERE jobs.owner_id = key.owner_id AND jobs.idempotency_key = i.idempotency_key OFFSET 0
  ) AS taken
  WHERE i.job_id NOT IN (SELECT id FROM job)
), old_event AS (
  {_key_taken_event("old", "old.asked", "old.asked_at")}
)
SELECT i.n, true AS created, {_owner_only("job.owner_id")}
FROM job JOIN attempt ON attempt.job_id = job.id JOIN input AS i ON i.job_id = job.id
UNION ALL
SELECT old.n, false, {_select("old", "j_", JOB_COLUMNS)}, {_select("a", "a_", ATTEMPT_COLUMNS)}
FROM old LEFT JOIN LATERAL (
  SELECT * FROM attempts WHERE attempts.job_id = old.id OFFSET 0
) AS a ON true
ORDER BY n, a_number"""

#: The key is taken: read the job and its attempts and write the ``replayed`` (same
#: fingerprint) or ``conflict`` event, in one statement with one snapshot. A row per
#: attempt, the job's columns repeated; none when no such job is visible.
REPLAY = f"""
WITH job AS (
  SELECT * FROM jobs WHERE owner_id = $1 AND idempotency_key = $2
), event AS (
  {_key_taken_event("job", "$3", "$4")}
)
SELECT {_select("job", "j_", JOB_COLUMNS)}, {_select("a", "a_", ATTEMPT_COLUMNS)}
FROM job LEFT JOIN attempts AS a ON a.job_id = job.id
ORDER BY a.number"""

#: R5 for a running attempt as one statement, outside a transaction: lock the job, then
#: the attempt (the order every other writer takes), compare-and-swap, move the attempt,
#: cancel the job's unsent attempts, write the events, wake the job's waiters in other
#: processes (``pg_notify`` here, not after the commit: ``pg_wakeups`` says why), and
#: return the decided job with a row per attempt. Once the attempt is locked and seen
#: ``running`` nothing can move it, so the CAS and the attempt's move happen together or
#: not at all; ``guard`` divides by zero (aborting the statement, so nothing is written)
#: should a CAS ever find no attempt to move.
#:
#: The statement's snapshot is taken before it waits for the job's lock, and a sibling
#: attempt added or moved by a transaction that committed meanwhile would be invisible
#: to it (left ``starting``, or returned in its old state). Every such writer also updates
#: the job's row (``_refresh_status``), so the statement acts only if the row it locked is
#: the row its snapshot sees (same ``xmin``). No row: the CAS did not win here (lost, the
#: attempt moved, or the job changed while waiting); the transaction path decides.
#: ``FOR NO KEY UPDATE``: the row's key never changes, and event inserts (whose foreign
#: key takes ``KEY SHARE`` on the job) need not wait for the decision.
FINALIZE_ALONE = f"""
WITH j AS (
  SELECT id, xmin AS locked_xmin FROM jobs
  WHERE id = (SELECT job_id FROM attempts WHERE id = $1)
  FOR NO KEY UPDATE
), a AS (
  SELECT job_id, read_version FROM attempts
  WHERE id = $1 AND state = 'running'
    AND job_id IN (
      SELECT j.id FROM j
      WHERE j.locked_xmin = (SELECT xmin FROM jobs AS seen WHERE seen.id = j.id)
    )
  FOR UPDATE
), cas AS (
  UPDATE jobs SET status = 'succeeded', result = $2::jsonb, error = NULL,
                  completed_by = $1, version = jobs.version + 1, updated_at = $3
  FROM a
  WHERE jobs.id = a.job_id AND jobs.version = a.read_version AND jobs.completed_by IS NULL
  RETURNING jobs.*
), att AS (
  UPDATE attempts SET state = 'succeeded', finished_at = $3, provider_request_id = $4,
                      reported_model = $5
  WHERE id = $1 AND EXISTS (SELECT 1 FROM cas)
  RETURNING *
), unsent AS (
  UPDATE attempts SET state = 'cancelled', finished_at = $3,
                      error = '{{"reason": "job_decided_before_send"}}'::jsonb
  WHERE job_id = (SELECT id FROM cas) AND state = 'starting'
  RETURNING *
), events AS (
  INSERT INTO job_events (job_id, attempt_id, kind, detail, at)
  SELECT att.job_id, att.id, 'attempt_succeeded',
         jsonb_build_object('version', cas.version, 'provider', att.provider), $3
  FROM cas, att
  UNION ALL
  SELECT unsent.job_id, unsent.id, 'attempt_cancelled', '{{"why": "decided"}}'::jsonb, $3
  FROM unsent
), others AS (
  SELECT * FROM attempts
  WHERE job_id = (SELECT id FROM cas) AND id <> $1 AND id NOT IN (SELECT id FROM unsent)
)
SELECT {_select("cas", "j_", JOB_COLUMNS)}, {_select("x", "a_", ATTEMPT_COLUMNS)},
       pg_notify('{JOBS_CHANNEL}', cas.id) AS notified,
       1 / (SELECT count(*) FROM att)::int AS guard
FROM cas LEFT JOIN (
  SELECT * FROM att UNION ALL SELECT * FROM unsent UNION ALL SELECT * FROM others
) AS x ON true
ORDER BY x.number"""


#: Each column's name, and its name in a record with its table's prefix (``_select``):
#: spelled once, not per column of every row read.
_JOB_NAMES = tuple((c, f"j_{c}") for c in JOB_COLUMNS)
_ATTEMPT_NAMES = tuple((c, f"a_{c}") for c in ATTEMPT_COLUMNS)


def as_row(record: Any, names: Sequence[tuple[str, str]]) -> types.SimpleNamespace | None:
    """Read the prefixed columns ``names`` (column, name in ``record``) of an asyncpg
    record as a row (None when its ``id`` is NULL: a job without that attempt)."""
    values = {column: record[name] for column, name in names}
    if values["id"] is None:
        return None
    return types.SimpleNamespace(**values)


def job_of(records: Sequence[Any]) -> JobRecord:
    """Read a job from a row per attempt, its columns repeated (``j_``, ``a_`` prefixes)."""
    job_row = as_row(records[0], _JOB_NAMES)
    rows = [as_row(r, _ATTEMPT_NAMES) for r in records]
    return job_record(job_row, [r for r in rows if r is not None])


def as_json(value: Any) -> str:
    """Encode a JSON parameter as text, as the jsonb codec on the connection expects.

    NaN and the infinities are refused (``ValueError``), as JSON has none: a provider's
    result is checked here.
    """
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def as_checked_json(value: Any) -> str:
    """Encode a value already known to be storable JSON as text: a request's parsed input
    (``gateway.http.body`` refused NaN, the infinities and unpaired surrogates) or a
    scrubbed event detail.

    msgspec writes the same JSON value as ``as_json`` (jsonb keeps values, not text)
    at a twelfth of its cost; a creation encodes three (its input and two events). It
    would write a NaN as ``null`` where ``as_json`` refuses it, so a provider's result
    goes through ``as_json``.
    """
    return _encode_json(value).decode()


_encode_json = msgspec.json.Encoder().encode


#: Connections a store keeps checked out between its single statements, at most.
KEEP = 4


class KeptConnections:
    """A few pooled connections one store keeps checked out between its statements.

    Each statement the store sends alone (``checkout``) took a connection from the pool
    and gave it back: SQLAlchemy's greenlet, its checkout and check-in events and its
    reset, about 100 and 70 µs of CPU at one connection on this host (timed in the
    gateway), twice per sync job. And the pool hands out the connection idle longest,
    so at one connection each statement went to another of its backends, cold: a sync
    job cost PostgreSQL 0.79x the CPU on kept connections (docs/benchmarks.md,
    thirteenth session).

    So the last ``most`` connections given back after a statement that ended cleanly
    stay out, newest first. They are still the pool's, counted as checked out, so the
    pool's size bounds them with the rest, and one is kept only while the pool is
    within its size (never an overflow connection, never while others may be waiting
    for one). One that sat idle ``IDLE_PING_AFTER`` or longer, or whose socket the
    driver saw close, goes back to the pool with its idle time (``IDLE_SINCE``), and
    the pool's checkout pings it as it would any idle connection; each ``take`` sends
    the oldest stale ones back too. A statement that failed gives its connection back
    as before (a lost one invalidated), never to the kept ones, and so does a cancelled
    one. ``give_back`` returns them all and keeps none after: the store calls it before
    disposing of the engine.

    Not done: SQLAlchemy invalidates a whole pool when one of its ``Connection`` objects
    meets a lost server; the kept ones are not checked against that (it is private
    state), so after a restart up to ``most`` statements may meet their dead connection
    and answer 503, as any pooled connection used within ``IDLE_PING_AFTER`` would.
    """

    def __init__(self, engine: AsyncEngine, most: int = KEEP) -> None:
        self.engine = engine
        self.most = most
        self._idle: list[PoolProxiedConnection] = []
        self._closed = False

    async def take(self) -> PoolProxiedConnection | None:
        """Return the newest kept connection still fresh enough to use unpinged, if any."""
        while self._idle and not _fresh(self._idle[0]):
            await hand_back(self.engine, self._idle.pop(0))  # pinged at its next checkout
        while self._idle:
            fairy = self._idle.pop()
            if _fresh(fairy):
                del fairy.info[IDLE_SINCE]
                return fairy
            await hand_back(self.engine, fairy)
        return None

    def keep(self, fairy: PoolProxiedConnection) -> bool:
        """Keep a connection after a statement that ended cleanly, if there is room."""
        pool = self.engine.pool
        if (
            self._closed
            or len(self._idle) >= self.most
            or not isinstance(pool, QueuePool)
            or pool.checkedout() > pool.size()  # this one included
        ):
            return False
        fairy.info[IDLE_SINCE] = time.monotonic()
        self._idle.append(fairy)
        return True

    async def give_back(self) -> None:
        """Return every kept connection to the pool, and keep none from now on."""
        self._closed = True
        idle, self._idle = self._idle, []
        for fairy in idle:
            await hand_back(self.engine, fairy)


def _fresh(fairy: PoolProxiedConnection) -> bool:
    driver = fairy.driver_connection
    return (
        time.monotonic() - fairy.info[IDLE_SINCE] < IDLE_PING_AFTER
        and driver is not None
        and not driver.is_closed()
    )


async def fetch(
    driver: Any,
    sql: str,
    params: tuple[Any, ...],
    meanwhile: Callable[[], None] | None = None,
    timeout: float | None = None,
) -> Any:
    """Send ``sql`` and return its rows; run ``meanwhile`` while it is on the wire.

    Scheduled before the statement is sent, ``meanwhile`` runs at the loop's next turn:
    by then asyncpg has written the statement and waits for the answer (a statement not
    yet prepared waits for its Parse first, and ``meanwhile`` runs during that wait).
    ``timeout``: seconds for the answer (None: the connection's ``command_timeout``).
    """
    if meanwhile is not None:
        asyncio.get_running_loop().call_soon(meanwhile)
    return await driver.fetch(sql, *params, timeout=timeout)


@contextlib.asynccontextmanager
async def checkout(
    engine: AsyncEngine, sql: str, kept: KeptConnections | None = None
) -> AsyncIterator[Any]:
    """Yield a pooled asyncpg connection for one statement outside a transaction; raise
    its errors as SQLAlchemy's do. With ``kept``, take a kept connection if there is one,
    and keep this one afterwards if the statement ended cleanly (``KeptConnections``).

    The connection comes from the engine's pool (its checkout events, the idle ping
    included, still run), without an SQLAlchemy ``Connection`` around it: building that,
    setting AUTOCOMMIT on it and resetting it on return cost more CPU than the statement
    (~250 µs against ~20 µs here, measured with ``SELECT 1``). Nothing here opens a
    transaction on the SQLAlchemy adapter, so giving the connection back is a plain
    return to the pool, with no rollback to await; only when the pool is full (an
    overflow connection, which the pool closes) does it go through SQLAlchemy's greenlet.

    A lost connection is a ``DBAPIError`` with ``connection_invalidated`` (the pool
    drops it), and every caller above handles one kind of database error.
    """
    fairy = await kept.take() if kept is not None else None
    if fairy is None:
        fairy = await pooled_connection(engine)
    driver = fairy.driver_connection
    clean = invalidating = False
    try:
        yield driver
        clean = True
    except Exception as exc:
        import asyncpg

        from_driver = type(exc).__module__.startswith("asyncpg")
        if not (from_driver or isinstance(exc, OSError | TimeoutError)):
            raise
        # A server error (a constraint, a bad statement) leaves the connection usable;
        # anything else (a cut socket, "cannot switch to state", a closed connection,
        # an admin shutdown) means it is not, and the pool must not hand it out again.
        server_error = isinstance(exc, asyncpg.PostgresError) and not isinstance(
            exc, asyncpg.PostgresConnectionError | asyncpg.AdminShutdownError
        )
        lost = not server_error or (driver is not None and driver.is_closed())
        if lost:
            # Closing the broken connection awaits the driver: SQLAlchemy's greenlet.
            # The invalidation checks the connection in itself: ``finally`` must not,
            # even when this caller is cancelled while it runs (a second check-in would
            # put the dying connection in the pool's queue for someone else).
            invalidating = True
            terminate(driver)  # no goodbye: the invalidation must not wait on the server
            await _to_the_end(fairy.invalidate, exc)
        raise sa.exc.DBAPIError(sql, None, exc, connection_invalidated=lost) from exc
    finally:
        if not (invalidating or (clean and kept is not None and kept.keep(fairy))):
            await hand_back(engine, fairy)


async def hand_back(engine: AsyncEngine, fairy: PoolProxiedConnection) -> None:
    """Return a connection to the pool, or close it when the pool is full."""
    pool = engine.pool
    if isinstance(pool, QueuePool) and pool.checkedin() < pool.size():
        fairy.close()
    else:  # the pool closes this one: the driver's close is awaited
        await _to_the_end(fairy.close)


#: Connection hand-backs still running after their caller was cancelled (kept referenced).
_HANDING_BACK: set[asyncio.Future[Any]] = set()


async def _to_the_end(fn: Any, *args: Any) -> None:
    """Run a pool hand-back (``close``, ``invalidate``) that awaits the driver to its end.

    A caller cancelled once reaches here through ``finally``; cancelled again while the
    driver is awaited, it would leave the connection checked out for good, and the pool
    one connection smaller. So the hand-back runs as a task of its own that a cancellation
    of the caller does not stop (as ``AsyncConnection.__aexit__`` does in SQLAlchemy).
    """
    task = asyncio.ensure_future(greenlet_spawn(fn, *args))
    _HANDING_BACK.add(task)
    task.add_done_callback(_HANDING_BACK.discard)
    await asyncio.shield(task)
