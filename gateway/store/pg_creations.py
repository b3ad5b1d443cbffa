"""PostgreSQL: creations that arrive in one turn of the event loop go in one statement.

On a host where PostgreSQL shares the cores with the gateway, a creation's cost is mostly
CPU, and PostgreSQL's share of it is per statement and per commit: pgbench on the store's
creation statement spent 0.34-0.48 ms of host CPU per job with one job per statement,
0.13-0.18 ms with four and 0.10-0.15 ms with eight (docs/benchmarks.md). Through the
gateway at 16 connections, the creations that reach the store in one loop turn were
about six on average (1 to 15).

So a creation is queued, and at the end of the loop turn that queued the first of them
(``call_soon``, no timer), the queue goes out: one job alone as ``CREATE_BY_KEY``, the
very statement it went as before, several as ``CREATE_BY_KEY_BATCH``, which returns each
job's rows under its position. At one connection nothing waits for anything; under load
nothing waits longer than the loop turn it arrived in. Each batch takes a pooled
connection of its own, so batches do not queue behind one another either.

Each job keeps its own outcome: created, a replay or conflict of a visible job, or
nothing (an unknown key, or the key's job not visible yet, which the caller settles as
before). All of a batch commits or none does, and a job is only answered once its batch
committed. A batch refused by the server (a constraint, a deadlock it broke, a value too
long) is sent again one job at a time, so one bad job fails alone, with its own error;
a lost connection fails the jobs of that batch with the error each would have met.

A caller cancelled while its batch is on the wire does not stop the batch: the others in
it still get their answers, and its job, if created, is there for its retry to replay.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.store import pg_round_trips as pg

log = logging.getLogger("onejob.store")

#: Jobs in one statement at most (a burst larger than this goes as several batches).
MAX_BATCH = 32
#: ``CREATE_BY_KEY``'s parameters that are one value per job; the rest are its events.
_PER_JOB = 17


class CreationBatcher:
    """Send the creations queued in one loop turn together (module docstring)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._queued: list[tuple[tuple[Any, ...], asyncio.Future[list[Any]]]] = []
        self._sending: set[asyncio.Task[None]] = set()
        #: Statements sent, by how many jobs each carried (for tests and measurements).
        self.sent: dict[int, int] = {}

    async def create(self, params: tuple[Any, ...]) -> list[Any]:
        """Create one job (``CREATE_BY_KEY``'s parameters); return its rows, as that
        statement would (none: the statement could not tell)."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[list[Any]] = loop.create_future()
        if not self._queued:
            loop.call_soon(self._flush)
        self._queued.append((params, answer))
        return await answer

    def _flush(self) -> None:
        queued, self._queued = self._queued, []
        for start in range(0, len(queued), MAX_BATCH):
            task = asyncio.create_task(self._send(queued[start : start + MAX_BATCH]))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[tuple[tuple[Any, ...], asyncio.Future[list[Any]]]]) -> None:
        try:
            if len(batch) == 1:
                params, answer = batch[0]
                _answer(answer, await self._alone(params))
                return
            self.sent[len(batch)] = self.sent.get(len(batch), 0) + 1
            try:
                rows = await self._together([params for params, _ in batch])
            except sa.exc.DBAPIError as exc:
                if exc.connection_invalidated:
                    raise
                log.info(
                    "a batch of %d creations was refused (%s); sending them one by one",
                    len(batch),
                    type(exc.orig).__name__,
                )
                await asyncio.gather(*(self._one_by_one(p, a) for p, a in batch))
                return
            by_position: list[list[Any]] = [[] for _ in batch]
            for row in rows:
                by_position[row["n"] - 1].append(row)
            for (_, answer), own in zip(batch, by_position, strict=True):
                _answer(answer, own)
        except BaseException as exc:
            for _, answer in batch:
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

    async def _alone(self, params: tuple[Any, ...]) -> list[Any]:
        self.sent[1] = self.sent.get(1, 0) + 1
        async with pg.checkout(self.engine, pg.CREATE_BY_KEY) as driver:
            return list(await driver.fetch(pg.CREATE_BY_KEY, *params))

    async def _together(self, jobs: Sequence[tuple[Any, ...]]) -> list[Any]:
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
        sql = pg.CREATE_BY_KEY_BATCH
        async with pg.checkout(self.engine, sql) as driver:
            return list(await driver.fetch(sql, *columns, positions, attempt_ids, kinds, details))

    async def close(self) -> None:
        """Wait for the batches on the wire (their callers are waiting for them too)."""
        if self._queued:
            self._flush()
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)


def _answer(answer: asyncio.Future[list[Any]], rows: list[Any]) -> None:
    if not answer.done():  # its caller may have been cancelled meanwhile
        answer.set_result(rows)
