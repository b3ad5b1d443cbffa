"""PostgreSQL: wake other processes after a commit, with NOTIFY outside the transaction.

A transaction that runs ``NOTIFY`` (``pg_notify``) takes, as it commits, a lock that every
notifying transaction of the cluster takes (``PreCommit_Notify`` locks the database
object, to keep the notification queue in commit order) and holds it through its WAL
flush. Notifying commits therefore wait for one another and lose group commit. pgbench on
the store's own creation statement, 16 clients, one run: 4,280 TPS as it is, 1,731 with
``pg_notify`` in the statement, 3,712 with ``pg_notify`` as a statement of its own after
it (docs/benchmarks.md).

So the store commits first and notifies after, here, for what its transactions change
(``_tx``: they used to send a ``SELECT pg_notify`` before their COMMIT) and for a created
attempt no runner of this process took. Those wake-ups coalesce: "an attempt was created"
carries nothing, so a burst of creations costs one NOTIFY, and wake-ups posted while a
send is on the wire go together in the next one, with no timer. The one exception is the
winning decision in one statement (``finalize.FINALIZE_ALONE``): it keeps its
``pg_notify``, because a send of its own after it cost the sync path more than the lock
did on this machine (an extra round trip per job: +0.25 ms p50 at 1 connection, -3 % at
16, alternated in docs/benchmarks.md), and decisions did not reach the lock's ceiling.

Wake-ups are hints, never the record: the dispatcher polls (``poll_interval``) and a
waiter re-reads (``service.waiting.WAIT_POLL_INTERVAL``) without one, and a listener that gets one
reads a commit that is already visible. What sending after the commit costs is latency in
one case only: the process dies between its commit and the send, and the other processes
then find the change on their next poll instead.

They go on a connection of their own, taken from the pool once and detached from it: a
pool checkout per send cost more CPU than the send (145 µs against 60, measured in one
process). Its backend stays among the process's own (``track_backends``), so its echo is
dropped like the pool's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.notify import ATTEMPTS_CHANNEL, JOBS_CHANNEL
from gateway.store.engine import pooled_connection

log = logging.getLogger("onejob.store")

#: Every wake-up of a batch in one statement, in the order posted.
NOTIFY = (
    "SELECT pg_notify(n.channel, n.payload)"
    " FROM unnest($1::text[], $2::text[]) AS n(channel, payload)"
)
MAX_BATCH = 1000  # notifications in one statement (a job id is ~30 bytes)
CLOSE_TIMEOUT = 5.0  # seconds ``close`` waits for the last send
SEND_TIMEOUT = 10.0  # seconds one send may take before its connection is dropped


class Wakeups:
    """This process's wake-ups for the others, sent after the commits that made them."""

    def __init__(self, engine: AsyncEngine, own_backends: set[int]) -> None:
        self._engine = engine
        self._own_backends = own_backends  # the hub's: a closed backend leaves it
        self._conn: Any = None  # the asyncpg connection the wake-ups go on
        self._jobs: dict[str, None] = {}  # an ordered set: job ids changed, not yet sent
        self._attempt = False  # an unclaimed attempt was created, not yet announced
        self._sending: asyncio.Task[None] | None = None
        self.sent = 0  #: notifications sent (tests read these two)
        self.dropped = 0  #: notifications a failed send lost (the poll finds those changes)
        #: The store's ``unavailable``: an outage is counted there, not logged per send.
        self.unavailable: Callable[[BaseException, str], bool] | None = None

    def post(self, jobs: Iterable[str] = (), *, attempt: bool = False) -> None:
        """Announce committed changes: ``jobs`` changed; ``attempt``: one awaits a runner."""
        self._jobs.update(dict.fromkeys(jobs))
        self._attempt = self._attempt or attempt
        if self._sending is None and (self._jobs or self._attempt):
            self._sending = asyncio.get_running_loop().create_task(self._send_all())

    async def _send_all(self) -> None:
        try:
            while self._jobs or self._attempt:
                await self._send(self._take())
        finally:
            self._sending = None

    def _take(self) -> list[tuple[str, str]]:
        batch = [(ATTEMPTS_CHANNEL, "")] if self._attempt else []
        self._attempt = False
        while self._jobs and len(batch) < MAX_BATCH:
            job_id = next(iter(self._jobs))
            del self._jobs[job_id]
            batch.append((JOBS_CHANNEL, job_id))
        return batch

    async def _send(self, batch: list[tuple[str, str]]) -> None:
        channels = [channel for channel, _ in batch]
        payloads = [payload for _, payload in batch]
        try:
            conn = await self._connection()
            await asyncio.wait_for(conn.execute(NOTIFY, channels, payloads), SEND_TIMEOUT)
        except Exception as exc:  # a hint lost: the others' polls find these changes
            self.dropped += len(batch)
            if self.unavailable is None or not self.unavailable(exc, "wake-ups"):
                log.warning(
                    "wake-ups not sent (%d); other processes will poll: %s", len(batch), exc
                )
            await self._drop_connection()
            return
        self.sent += len(batch)

    async def _connection(self) -> Any:
        if self._conn is not None and self._conn.is_closed():  # the server cut it
            await self._drop_connection()
        if self._conn is None:
            fairy = await pooled_connection(self._engine)
            conn = fairy.driver_connection
            fairy.detach()  # this process's notifying connection, outside the pool's count
            self._conn = conn
        return self._conn

    async def _drop_connection(self, *, goodbye: bool = False) -> None:
        """Forget the connection and its backend; close it (``goodbye``) or cut it."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        self._own_backends.discard(conn.get_server_pid())
        if conn.is_closed():
            return
        if goodbye:
            with contextlib.suppress(Exception):  # else cut below: the server drops it too
                await asyncio.wait_for(conn.close(), CLOSE_TIMEOUT)
                return
        conn.terminate()  # no goodbye owed to a connection that just failed

    async def drain(self) -> None:
        """Wait until what is posted is sent (or dropped), within ``CLOSE_TIMEOUT``."""
        task = self._sending
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), CLOSE_TIMEOUT)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def close(self) -> None:
        """Send what is posted, then close the connection (before the engine goes)."""
        await self.drain()
        await self._drop_connection(goodbye=True)
