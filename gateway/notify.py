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

    @property
    def watched_jobs(self) -> int:
        """Count the jobs somebody is waiting on."""
        return len(self._job_waiters)


async def listen_postgres(dsn: str, hub: ChangeHub, stop: asyncio.Event) -> None:
    """Relay ``pg_notify`` from other processes into ``hub`` until ``stop`` is set."""
    import asyncpg  # local: only PostgreSQL deployments need it

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
        try:
            conn = await asyncpg.connect(dsn)
        except (OSError, asyncpg.PostgresError) as exc:
            log.warning("LISTEN connection failed, retrying: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 2.0)
            continue
        try:
            await conn.add_listener(ATTEMPTS_CHANNEL, on_attempt)
            await conn.add_listener(JOBS_CHANNEL, on_job)
            # Anything created while we were not listening is found by the poll fallback.
            hub.publish_attempt()
            while not stop.is_set() and not conn.is_closed():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 5.0)
        finally:
            with contextlib.suppress(Exception):
                await conn.close()
