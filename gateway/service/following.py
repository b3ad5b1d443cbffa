"""Following a job as it changes: its audit events, then every change, until it is done.

The event stream (``GET /v1/jobs/{id}/events`` as ``text/event-stream``) is this, sent as
it comes: first the job's events past the one the client last saw (``Last-Event-ID``),
and the job itself; then, each time the job changes, its new events and the job again.
It is woken by the same notifications as ``Prefer: wait`` (this process's commits at once,
another process's through LISTEN) and re-reads every ``WAIT_POLL_INTERVAL`` without one
(SQLite across processes). It ends when the job is succeeded, failed or cancelled (a
failed job may be reopened by a new attempt: follow it again), or after ``STREAM_LIMIT``
(the client resumes with the last event id). A database that does not answer meanwhile
is asked again at the next poll; the stream stays open.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator

from gateway.domain.records import EventRecord, JobRecord
from gateway.domain.states import JobStatus
from gateway.notify import ChangeHub
from gateway.service.base import ServiceBase
from gateway.service.waiting import WAIT_POLL_INTERVAL

STREAM_LIMIT = 300.0  # seconds one stream lasts; the client resumes with Last-Event-ID
HEARTBEAT = 15.0  # seconds of silence after which a keep-alive goes out
#: A job in one of these has nothing more to say: the stream ends with it.
DONE = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})


@dataclasses.dataclass(frozen=True, slots=True)
class Change:
    """One thing the stream sends: an audit event, the job as it is now, or a keep-alive."""

    event: EventRecord | None = None
    job: JobRecord | None = None


class Following(ServiceBase):
    """Follow one job's changes (the event stream)."""

    async def follow(
        self,
        job: JobRecord,
        after: int | None = None,
        *,
        limit: float = STREAM_LIMIT,
        heartbeat: float = HEARTBEAT,
    ) -> AsyncIterator[Change]:
        """Yield ``job``'s events past ``after`` and the job, then each change (module
        docstring); an empty ``Change`` is a keep-alive. ``job`` is the caller's, read."""
        hub = self.hub or ChangeHub()
        deadline = time.monotonic() + limit
        last_said = time.monotonic()
        shown: JobRecord | None = None
        with hub.watch(job.id) as watch:
            while True:
                try:
                    # The job first, then its events: every event committed with the state
                    # read is then among them (read the other way round, a decision
                    # committed between the two reads ended the stream without its events).
                    now = await self.store.get_job(job.id, job.owner_id)
                    events = await self.store.events(job.id, after=after, owner_id=job.owner_id)
                except Exception as exc:
                    if not self.store.unavailable(exc, "event stream"):
                        raise
                    events, now = [], None
                for event in events:
                    yield Change(event=event)
                    after, last_said = event.id, time.monotonic()
                if now is not None and now != shown:
                    yield Change(job=now)
                    shown, last_said = now, time.monotonic()
                if shown is not None and shown.status in DONE:
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                await watch.wait(min(remaining, WAIT_POLL_INTERVAL))
                watch.take()
                if hub.closing:  # the server is stopping: the client resumes elsewhere
                    return
                if time.monotonic() - last_said >= heartbeat:
                    yield Change()
                    last_said = time.monotonic()
