"""PostgreSQL: creations that arrive while one is on the wire go together, in one statement
(the ``creation_batches`` shortcut; off, each creation goes alone).

On a host where PostgreSQL shares the cores with the gateway, a creation's cost is mostly
CPU, and PostgreSQL's share of it is per statement and per commit: the store's creation
statement cost PostgreSQL 0.28 ms per job sent alone and 0.13 ms per job in batches of
about six (``pg_stat_statements``, docs/benchmarks.md).

So each process keeps at most ``IN_FLIGHT`` creation statements on the wire, as a
database's group commit does: a creation that arrives while one is out waits for it to
come back, with every other creation that arrives meanwhile, and they go out together.
One job alone goes as ``CREATE_BY_KEY``, the very statement it went as before; several
as ``CREATE_BY_KEY_BATCH``, which returns each job's rows under its position. At one
connection nothing waits for anything (the queue goes at the end of the loop turn, no
timer); under load a batch grows with the round trip it waited for, up to ``MAX_BATCH``.
Nothing a creation does can wait on another process for long: the only lock it may
wait for is a concurrent insert of the same key, itself one statement, and batches take
those in (owner, key) order.

Each job keeps its own outcome: created, a replay or conflict of a visible job, or
nothing (an unknown key, or the key's job not visible yet, which the caller settles as
before). All of a batch commits or none does, and a job is only answered once its batch
committed. A batch refused by the server (a constraint, a deadlock it broke, a value too
long) is sent again one job at a time, so one bad job fails alone, with its own error;
a lost connection fails the jobs of that batch with the error each would have met (503:
the batch rolled back, or committed and a retry replays it).

A creation sent alone runs its ``meanwhile`` (``ClaimSpec.meanwhile``: the runner rendering
the prompt of the attempt it is about to claim) while the statement is on the wire, the
loop otherwise idle: at one connection that work leaves the serial path. One in a batch
does not (under load the loop has other work, and the runner renders it as before).

A caller cancelled while its batch is on the wire does not stop the batch: the others in
it still get their answers, and its job, if created, is there for its retry to replay.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from gateway.settings import DatabaseConfig
from gateway.store.create import (
    CREATE_BY_KEY,
    INSERT_ATTEMPT,
    INSERT_JOB,
    key_taken_event,
    owner_only,
)
from gateway.store.database import MIN_STATEMENT_TIME, Postgres
from gateway.store.failures import NotSent
from gateway.store.rows import ATTEMPT_COLUMNS, JOB_COLUMNS, prefixed

#: Seconds a creation has for its answer when the store is given no configuration.
DEFAULT_TIMEOUT = DatabaseConfig().timeout

log = logging.getLogger("onejob.store")

#: ``CREATE_BY_KEY`` for several jobs in one statement and one commit
#: (this module): $1-$21 are arrays, one element per job, of ``CREATE_BY_KEY``'s $1-$21;
#: $22-$25 the events of all of them, each with its job's position (from 1). A row per
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
                       $17::timestamp[], $18::timestamp[], $19::timestamp[],
                       $20::varchar[], $21::varchar[])
    WITH ORDINALITY AS i(job_id, key_hash, idempotency_key, fingerprint, contract,
                         provider, requested_provider, input, status, at, attempt_id,
                         state, read_version, lease_owner, lease_expires_at, deadline_at,
                         started_at, job_deadline_at, ready_at, traceparent, tracestate, n)
), key AS (
  SELECT i.n, k.owner_id FROM input AS i CROSS JOIN LATERAL (
    SELECT owner_id FROM api_keys WHERE key_hash = i.key_hash AND revoked_at IS NULL OFFSET 0
  ) AS k
), job AS (
  {INSERT_JOB}
  SELECT i.job_id, key.owner_id, i.idempotency_key, i.fingerprint, i.contract, i.provider,
         i.requested_provider, i.input, i.status, 1, i.at, i.at, i.job_deadline_at,
         i.traceparent, i.tracestate
  FROM input AS i JOIN key ON key.n = i.n
  ORDER BY key.owner_id, i.idempotency_key
  ON CONFLICT (owner_id, idempotency_key) DO NOTHING
  RETURNING *
), attempt AS (
  {INSERT_ATTEMPT}
  SELECT i.attempt_id, job.id, 1, job.provider, 'initial', i.state, i.read_version,
         i.lease_owner, i.lease_expires_at, i.deadline_at, job.id || '/1', i.at, i.started_at,
         i.ready_at, job.owner_id
  FROM job JOIN input AS i ON i.job_id = job.id
  RETURNING *
), events AS (
  INSERT INTO job_events (job_id, owner_id, attempt_id, kind, detail, at)
  SELECT attempt.job_id, attempt.owner_id, e.attempt_id, e.kind, e.detail, i.at
  FROM unnest($22::int[], $23::varchar[], $24::varchar[], $25::jsonb[])
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
  {key_taken_event("old", "old.asked", "old.asked_at")}
)
SELECT i.n, true AS created, {owner_only("job.owner_id")}
FROM job JOIN attempt ON attempt.job_id = job.id JOIN input AS i ON i.job_id = job.id
UNION ALL
SELECT old.n, false, {prefixed("old", "j_", JOB_COLUMNS)}, {prefixed("a", "a_", ATTEMPT_COLUMNS)}
FROM old LEFT JOIN LATERAL (
  SELECT * FROM attempts
  WHERE attempts.owner_id = old.owner_id AND attempts.job_id = old.id OFFSET 0
) AS a ON true
ORDER BY n, a_number"""


#: Jobs in one statement at most (a burst larger than this goes as several batches).
MAX_BATCH = 32
#: Creation statements one process keeps on the wire; what arrives meanwhile goes next,
#: together. One cost PostgreSQL the least per job (docs/benchmarks.md, tenth session).
IN_FLIGHT = 1
#: Seconds a statement may be out before the next batch goes beside it anyway. A creation
#: takes milliseconds; one out this long waits on a connection that went silent (a
#: partition, a failover), and the creations behind it must not wait for its deadline.
STUCK_AFTER = 0.5
CLOCK_SLACK = 0.001  # seconds: how early a timer of the loop may run
#: ``CREATE_BY_KEY``'s parameters that are one value per job; the rest are its events.
_PER_JOB = 21


@dataclasses.dataclass(slots=True)
class _Queued:
    """One queued creation: its parameters, its answer, its ``meanwhile``, its deadline."""

    params: tuple[Any, ...]
    answer: asyncio.Future[list[Any]]
    meanwhile: Callable[[], None] | None
    deadline: float  #: the loop's time by which its caller must have an answer


class CreationBatcher:
    """Send the creations that queue while one is on the wire together (module docstring).

    Each creation has ``timeout`` seconds from its call, the database's statement
    deadline: one still queued when it passes is answered ``NotSent`` (nothing was sent),
    and a batch's statement is given what its most pressed member has left.
    """

    def __init__(self, db: Postgres, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.db = db
        self.timeout = timeout
        self._queued: list[_Queued] = []
        #: Statements on the wire, with the loop's time each was sent.
        self._sending: dict[asyncio.Task[None], float] = {}
        self._flush_due = False
        self._unstick: asyncio.TimerHandle | None = None
        #: Statements sent, by how many jobs each carried (for tests and measurements).
        self.sent: dict[int, int] = {}

    async def create(
        self, params: tuple[Any, ...], meanwhile: Callable[[], None] | None = None
    ) -> list[Any]:
        """Create one job (``CREATE_BY_KEY``'s parameters); return its rows, as that
        statement would (none: the statement could not tell). ``meanwhile`` runs while
        the statement is on the wire if it goes alone (module docstring)."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[list[Any]] = loop.create_future()
        self._queued.append(_Queued(params, answer, meanwhile, loop.time() + self.timeout))
        self._flush_soon()
        return await answer

    def _flush_soon(self) -> None:
        if not self._queued or self._flush_due:
            return
        if len(self._sending) < IN_FLIGHT:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush)
        elif self._unstick is None:
            # Next look: when the youngest statements out have been out ``STUCK_AFTER``
            # (one more may then go beside them), or a queued creation's deadline passes
            # (answered ``NotSent``), whichever comes first. Not before: armed at the
            # oldest's time, which had passed, this timer fired at every turn of the loop
            # while a statement hung (290,048 times in 4.5 s, tests/unit/store).
            youngest = sorted(self._sending.values())[-IN_FLIGHT]
            first_due = min(q.deadline for q in self._queued)
            self._unstick = asyncio.get_running_loop().call_at(
                min(youngest + STUCK_AFTER, first_due), self._flush_beside
            )

    def _flush_beside(self) -> None:
        """Send what queued behind a statement out ``STUCK_AFTER`` or longer, beside it;
        answer those whose deadline passed in line."""
        self._unstick = None
        # The loop runs a timer up to its clock's resolution early.
        now = asyncio.get_running_loop().time() + CLOCK_SLACK
        stuck = sum(1 for sent in self._sending.values() if now - sent >= STUCK_AFTER)
        self._flush(limit=IN_FLIGHT + stuck)
        self._flush_soon()

    def _flush(self, limit: int = IN_FLIGHT) -> None:
        self._flush_due = False
        now = asyncio.get_running_loop().time()
        for late in [q for q in self._queued if q.deadline <= now]:
            if not late.answer.done():
                late.answer.set_exception(NotSent("the creation waited its deadline in line"))
        self._queued = [q for q in self._queued if q.deadline > now and not q.answer.done()]
        while self._queued and len(self._sending) < limit:
            batch, self._queued = self._queued[:MAX_BATCH], self._queued[MAX_BATCH:]
            task = asyncio.create_task(self._send(batch))
            self._sending[task] = now
            task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._sending.pop(task, None)
        if self._unstick is not None and not self._sending:
            self._unstick.cancel()
            self._unstick = None
        self._flush_soon()

    async def _send(self, batch: list[_Queued]) -> None:
        # The statement is given what its most pressed member has left.
        left = min(q.deadline for q in batch) - asyncio.get_running_loop().time()
        timeout = max(left, MIN_STATEMENT_TIME)
        try:
            if len(batch) == 1:
                only = batch[0]
                _answer(only.answer, await self._alone(only.params, only.meanwhile, timeout))
                return
            self.sent[len(batch)] = self.sent.get(len(batch), 0) + 1
            try:
                rows = await self._together([q.params for q in batch], timeout)
            except sa.exc.DBAPIError as exc:
                if exc.connection_invalidated:
                    raise
                log.info(
                    "a batch of %d creations was refused (%s); sending them one by one",
                    len(batch),
                    type(exc.orig).__name__,
                )
                await asyncio.gather(*(self._one_by_one(q, timeout) for q in batch))
                return
            by_position: list[list[Any]] = [[] for _ in batch]
            for row in rows:
                by_position[row["n"] - 1].append(row)
            for queued, own in zip(batch, by_position, strict=True):
                _answer(queued.answer, own)
        except BaseException as exc:
            for queued in batch:
                if not queued.answer.done():
                    queued.answer.set_exception(exc)
            if not isinstance(exc, Exception):
                raise

    async def _one_by_one(self, queued: _Queued, timeout: float) -> None:
        try:
            _answer(queued.answer, await self._alone(queued.params, None, timeout))
        except Exception as exc:
            if not queued.answer.done():
                queued.answer.set_exception(exc)

    async def _alone(
        self, params: tuple[Any, ...], meanwhile: Callable[[], None] | None, timeout: float
    ) -> list[Any]:
        self.sent[1] = self.sent.get(1, 0) + 1
        return await self.db.alone(CREATE_BY_KEY, params, meanwhile=meanwhile, timeout=timeout)

    async def _together(self, jobs: Sequence[tuple[Any, ...]], timeout: float) -> list[Any]:
        params = batch_parameters(jobs)
        return await self.db.alone(CREATE_BY_KEY_BATCH, params, timeout=timeout)

    async def close(self) -> None:
        """Wait for the batches on the wire (their callers are waiting for them too)."""
        if self._unstick is not None:
            self._unstick.cancel()
            self._unstick = None
        while self._queued or self._sending:
            self._flush(limit=len(self._sending) + len(self._queued))
            await asyncio.gather(*self._sending, return_exceptions=True)


def batch_parameters(jobs: Sequence[tuple[Any, ...]]) -> list[Any]:
    """``CREATE_BY_KEY_BATCH``'s parameters for jobs given as ``CREATE_BY_KEY``'s."""
    columns: list[list[Any]] = [[job[i] for job in jobs] for i in range(_PER_JOB)]
    positions: list[int] = []
    attempt_ids: list[Any] = []
    kinds: list[Any] = []
    details: list[Any] = []
    for n, job in enumerate(jobs, start=1):
        event_attempts, event_kinds, event_details = job[_PER_JOB:]
        positions.extend([n] * len(event_kinds))
        attempt_ids.extend(event_attempts)
        kinds.extend(event_kinds)
        details.extend(event_details)
    return [*columns, positions, attempt_ids, kinds, details]


def _answer(answer: asyncio.Future[list[Any]], rows: list[Any]) -> None:
    if not answer.done():  # its caller may have been cancelled meanwhile
        answer.set_result(rows)
