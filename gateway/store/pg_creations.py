"""PostgreSQL: creations that arrive while one is on the wire go together, in one statement.

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
import logging
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.store import pg_round_trips as pg

log = logging.getLogger("onejob.store")

#: Jobs in one statement at most (a burst larger than this goes as several batches).
MAX_BATCH = 32
#: Creation statements one process keeps on the wire; what arrives meanwhile goes next,
#: together. One cost PostgreSQL the least per job (docs/benchmarks.md, tenth session).
IN_FLIGHT = 1
#: ``CREATE_BY_KEY``'s parameters that are one value per job; the rest are its events.
_PER_JOB = 17

#: One queued creation: its parameters, its answer, its ``meanwhile``.
_Queued = tuple[tuple[Any, ...], asyncio.Future[list[Any]], Callable[[], None] | None]


class CreationBatcher:
    """Send the creations that queue while one is on the wire together (module docstring)."""

    def __init__(self, engine: AsyncEngine, kept: pg.KeptConnections | None = None) -> None:
        self.engine = engine
        self.kept = kept
        self._queued: list[_Queued] = []
        self._sending: set[asyncio.Task[None]] = set()
        self._flush_due = False
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
        self._queued.append((params, answer, meanwhile))
        self._flush_soon()
        return await answer

    def _flush_soon(self) -> None:
        if self._queued and not self._flush_due and len(self._sending) < IN_FLIGHT:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self, limit: int = IN_FLIGHT) -> None:
        self._flush_due = False
        while self._queued and len(self._sending) < limit:
            batch, self._queued = self._queued[:MAX_BATCH], self._queued[MAX_BATCH:]
            task = asyncio.create_task(self._send(batch))
            self._sending.add(task)
            task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._sending.discard(task)
        self._flush_soon()

    async def _send(self, batch: list[_Queued]) -> None:
        try:
            if len(batch) == 1:
                params, answer, meanwhile = batch[0]
                _answer(answer, await self._alone(params, meanwhile))
                return
            self.sent[len(batch)] = self.sent.get(len(batch), 0) + 1
            try:
                rows = await self._together([params for params, _, _ in batch])
            except sa.exc.DBAPIError as exc:
                if exc.connection_invalidated:
                    raise
                log.info(
                    "a batch of %d creations was refused (%s); sending them one by one",
                    len(batch),
                    type(exc.orig).__name__,
                )
                await asyncio.gather(*(self._one_by_one(p, a) for p, a, _ in batch))
                return
            by_position: list[list[Any]] = [[] for _ in batch]
            for row in rows:
                by_position[row["n"] - 1].append(row)
            for (_, answer, _), own in zip(batch, by_position, strict=True):
                _answer(answer, own)
        except BaseException as exc:
            for _, answer, _ in batch:
                if not answer.done():
                    answer.set_exception(exc)
            if not isinstance(exc, Exception):
                raise

    async def _one_by_one(self, params: tuple[Any, ...], answer: asyncio.Future[list[Any]]) -> None:
        try:
            _answer(answer, await self._alone(params))
        except Exception as exc:
            if not answer.done():
                answer.set_exception(exc)

    async def _alone(
        self, params: tuple[Any, ...], meanwhile: Callable[[], None] | None = None
    ) -> list[Any]:
        self.sent[1] = self.sent.get(1, 0) + 1
        async with pg.checkout(self.engine, pg.CREATE_BY_KEY, self.kept) as driver:
            return list(await pg.fetch(driver, pg.CREATE_BY_KEY, params, meanwhile))

    async def _together(self, jobs: Sequence[tuple[Any, ...]]) -> list[Any]:
        sql = pg.CREATE_BY_KEY_BATCH
        async with pg.checkout(self.engine, sql, self.kept) as driver:
            return list(await driver.fetch(sql, *batch_parameters(jobs)))

    async def close(self) -> None:
        """Wait for the batches on the wire (their callers are waiting for them too)."""
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
