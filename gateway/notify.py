"""Wake-ups without busy polling: "an attempt was created" and "job X changed".

In one process the store publishes after each commit. Across processes on PostgreSQL the
store also sends ``pg_notify``, right after the commit (``store.pg_wakeups``; the winning
decision in one statement sends it in that statement), and ``listen_postgres`` feeds
those notifications into the local hub. Polling stays as the safety net (the dispatcher's
``poll_interval``), so a lost notification only costs latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)

ATTEMPTS_CHANNEL = "onejob_attempts"
JOBS_CHANNEL = "onejob_jobs"


class JobWatch:
    """One waiter's view of a job: set when it changed, with the record when known."""

    def __init__(self) -> None:
        self.changed = asyncio.Event()
        #: The job as a transaction of this process committed it, since the last take.
        self.record: Any = None
        #: A change arrived that carried no record (another process's NOTIFY, or our own
        #: echoed back by LISTEN): the database may hold something newer than ``record``.
        self.reread = False

    async def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a change; say whether one came (and reset)."""
        try:
            # asyncio.timeout, not wait_for: no task of its own per wait (3.11's wait_for
            # wraps the coroutine in one).
            async with asyncio.timeout(timeout):
                await self.changed.wait()
        except TimeoutError:
            return False
        self.changed.clear()
        return True

    def take(self) -> tuple[Any, bool]:
        """Return the last record a change brought and whether to re-read; forget both."""
        taken = (self.record, self.reread)
        self.record, self.reread = None, False
        return taken


class ChangeHub:
    """Fan out job changes to waiting requests and attempt creations to idle runners."""

    def __init__(self) -> None:
        self._job_waiters: dict[str, set[JobWatch]] = defaultdict(set)
        self._attempt_event = asyncio.Event()
        #: PostgreSQL backend PIDs of this process's own pool (kept by the store). A
        #: notification one of them sent is this process's own echo: the store already
        #: published that change here after its commit, with the record.
        self.own_backends: set[int] = set()
        #: The LISTEN relay's state, when one runs (PostgreSQL): ``/readyz`` shows it.
        self.relay: RelayState | None = None
        #: Set once the server is stopping: a ``Prefer: wait`` answers and an event stream
        #: ends at its next wake-up, so they never hold a graceful shutdown.
        self.closing = False

    def publish_job(self, job_id: str, record: Any = None) -> None:
        """Wake everyone waiting on ``job_id``; hand them ``record`` if the publisher has it.

        A change from another process (``pg_notify``) carries no record: waiters re-read.
        """
        for watch in self._job_waiters.get(job_id, ()):
            if record is None:
                watch.reread = True
            else:
                watch.record = record
            watch.changed.set()

    def publish_attempt(self) -> None:
        """Wake idle runners: a ``starting`` attempt exists."""
        self._attempt_event.set()

    async def wait_attempt(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for an attempt wake-up; say whether one came."""
        try:
            async with asyncio.timeout(timeout):
                await self._attempt_event.wait()
        except TimeoutError:
            return False
        self._attempt_event.clear()
        return True

    @contextlib.contextmanager
    def watch(self, job_id: str) -> Any:
        """Register interest in ``job_id`` before reading it, so no change slips between."""
        watch = JobWatch()
        self._job_waiters[job_id].add(watch)
        try:
            yield watch
        finally:
            waiters = self._job_waiters.get(job_id)
            if waiters is not None:
                waiters.discard(watch)
                if not waiters:
                    del self._job_waiters[job_id]

    def close(self) -> None:
        """Say the server is stopping, and wake every waiter so that it notices now."""
        self.closing = True
        self.publish_all()

    def publish_all(self) -> None:
        """Wake every waiter to re-read its job (changes may have gone unannounced)."""
        for job_id in list(self._job_waiters):
            self.publish_job(job_id)

    @property
    def watched_jobs(self) -> int:
        """Count the jobs somebody is waiting on."""
        return len(self._job_waiters)


#: Seconds between the relay's checks that its connection still answers: LISTEN sits
#: idle, and a peer gone silent (a partition, a failover) would otherwise never be noticed.
RELAY_CHECK_INTERVAL = 2.0
RELAY_CHECK_TIMEOUT = 2.0  # seconds one check may take before the connection is dropped
RELAY_RETRY = 1.0  # seconds between attempts to connect again


class RelayState:
    """Whether the LISTEN relay is connected now, and how often it had to reconnect."""

    def __init__(self) -> None:
        self.connected = False
        self.reconnects = 0  #: connections made after the first
        self.last_error: str | None = None  #: why it last lost (or could not make) one
        self._ever = False

    def up(self) -> None:
        """Say the relay listens (again)."""
        if self._ever:
            self.reconnects += 1
            log.warning("LISTEN connection back", extra={"reconnects": self.reconnects})
        self.connected, self._ever = True, True

    def down(self, exc: BaseException) -> None:
        """Say the relay lost its connection, or could not make one; log the first time."""
        if self.connected or self.last_error is None:
            log.warning(
                "LISTEN connection lost (%s); other processes' changes are found by polling "
                "until it is back",
                type(exc).__name__,
            )
        self.connected = False
        self.last_error = type(exc).__name__


async def listen_postgres(
    connect: Callable[[], Awaitable[Any]],
    hub: ChangeHub,
    stop: asyncio.Event,
    state: RelayState | None = None,
) -> None:
    """Relay ``pg_notify`` from other processes into ``hub`` until ``stop`` is set.

    ``connect`` opens the connection (``PostgresConnector.connect``: on a multi-host URL,
    the primary's, where every NOTIFY is sent). Whatever breaks it (a lost connection, a
    failover, a check that got no answer, any error at all), it connects again; each time
    it is back, every waiter re-reads its job and idle runners look for work, as anything
    that changed meanwhile was not announced to this process.
    """
    state = state or RelayState()

    # Our own notifications come back too. Taken as another process's change they made a
    # waiter re-read the job it had just been handed (py-spy: a read per sync job, when
    # the echo beat the local publish), and woke the dispatcher for nothing.
    def on_attempt(_conn: object, pid: int, _channel: str, _payload: str) -> None:
        if pid not in hub.own_backends:
            hub.publish_attempt()

    def on_job(_conn: object, pid: int, _channel: str, payload: str) -> None:
        if pid not in hub.own_backends:
            hub.publish_job(payload)

    while not stop.is_set():
        conn: Any = None
        try:
            conn = await connect()
            await conn.add_listener(ATTEMPTS_CHANNEL, on_attempt)
            await conn.add_listener(JOBS_CHANNEL, on_job)
            state.up()
            # What changed while nobody listened: waiters re-read, runners look.
            hub.publish_attempt()
            hub.publish_all()
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), RELAY_CHECK_INTERVAL)
                if stop.is_set():
                    break
                await conn.fetchval("SELECT 1", timeout=RELAY_CHECK_TIMEOUT)
        except Exception as exc:  # any: the relay must outlive whatever broke it
            state.down(exc)
            _drop(conn)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), RELAY_RETRY)
            continue
        finally:
            if stop.is_set() and conn is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(conn.close(), 2.0)
                _drop(conn)
    state.connected = False


def _drop(conn: Any) -> None:
    """Terminate a connection without a goodbye (its peer may not answer one)."""
    if conn is not None and not conn.is_closed():
        conn.terminate()
