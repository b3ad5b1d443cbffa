"""Waiting for a job to settle (``Prefer: wait``), whatever the database does meanwhile.

A decision this process commits hands the waiter the job as its transaction left it, so
nothing is re-read; another process's change (NOTIFY), or none within
``WAIT_POLL_INTERVAL``, makes the waiter re-read. A re-read the database does not answer
by the deadline leaves the job as last known: the answer comes at the deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

from gateway.domain.records import JobRecord
from gateway.notify import ChangeHub
from gateway.service.base import ServiceBase

MAX_WAIT = 60.0  # seconds, the longest ``Prefer: wait`` honoured
WAIT_POLL_INTERVAL = 1.0  # seconds; re-read even without a wake-up (other processes, SQLite)


class Waiting(ServiceBase):
    """Answer a job once it is settled, or at a deadline."""

    async def wait_for(self, job: JobRecord, seconds: float, *, fresh: bool = False) -> JobRecord:
        """Return ``job`` once it is settled or ``seconds`` have passed, whichever is first.

        A change made in this process hands the waiter the job as its transaction
        committed it, so nothing is re-read; a change from another process (or none,
        within the poll interval) makes the waiter re-read. ``fresh``: ``job`` comes from
        this process's own creating transaction, so the first read is skipped.
        """
        seconds = max(0.0, min(seconds, MAX_WAIT))
        if job.status.settled or seconds == 0:
            return job
        deadline = time.monotonic() + seconds
        hub = self.hub or ChangeHub()
        with hub.watch(job.id) as watch:
            stale = not fresh
            while True:
                if stale:
                    # A re-read the database does not answer by the deadline leaves the
                    # job as last known, and one it fails is tried again at the next
                    # poll: the answer comes at the deadline, whatever the database does
                    # (a partition, a failover).
                    try:
                        read = await _within(
                            self.store.get_job(job.id, job.owner_id), deadline - time.monotonic()
                        )
                    except Exception as exc:
                        if not self.store.unavailable(exc, "wait"):
                            raise
                        read = job
                    if read is _LATE or read is None:
                        return job
                    assert isinstance(read, JobRecord)
                    job = read
                remaining = deadline - time.monotonic()
                if job.status.settled or remaining <= 0:
                    return job
                await watch.wait(min(remaining, WAIT_POLL_INTERVAL))
                record, reread = watch.take()
                if record is not None and record.status.settled:
                    # A decision this process committed is the answer, whatever the echo
                    # of its own NOTIFY says.
                    return record  # type: ignore[no-any-return]
                if record is not None:
                    job = record
                if hub.closing:  # the server is stopping: answer with the job as known
                    return job
                # Re-read after another process's change, or when the poll ran out.
                stale = reread or record is None


#: What ``_within`` returns for an awaitable that did not finish in time.
_LATE = object()
#: Reads left to finish after their waiter answered without them (kept referenced).
_ABANDONED: set[asyncio.Task[Any]] = set()


async def _within(awaitable: Coroutine[Any, Any, Any], seconds: float) -> Any:
    """Return what ``awaitable`` gives within ``seconds``, else ``_LATE``.

    A late one is not cancelled: a read cancelled in the middle of a statement leaves its
    connection for the pool to untangle. It finishes (or fails) within the database's own
    deadline, in the background, and its result is dropped.
    """
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=max(seconds, 0.0))
    except asyncio.CancelledError:
        task.cancel()
        raise
    if task in done:
        return task.result()
    _ABANDONED.add(task)
    task.add_done_callback(_forget)
    return _LATE


def _forget(task: asyncio.Task[Any]) -> None:
    _ABANDONED.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: a late read's failure is not "never retrieved"
