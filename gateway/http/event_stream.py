"""The job event stream as Server-Sent Events (``text/event-stream``, the WHATWG format).

Each audit event goes as ``event: <kind>`` with its ``id`` (a client resumes after it with
``Last-Event-ID``) and the event's JSON as ``data``; the job, as ``GET /v1/jobs/{id}``
shows it, goes as ``event: job`` whenever it changed; silence is broken by a comment (a
keep-alive for proxies and for the client's own silence timer). The service decides what
to send and when the stream ends (``gateway.service.following``).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from litestar.response import ServerSentEvent, ServerSentEventMessage

from gateway.domain.records import JobRecord
from gateway.errors import BadRequest
from gateway.http.views import event_view, job_view
from gateway.service.following import Change

EVENT_STREAM = "text/event-stream"
RETRY_MS = 1000  # what a browser's EventSource waits before it reconnects


def wants_stream(accept: str | None) -> bool:
    """Say whether the client asked for the event stream (``Accept: text/event-stream``)."""
    return accept is not None and EVENT_STREAM in accept.lower()


#: An event id as the stream sends it: decimal digits, within a signed 64-bit integer.
EVENT_ID = re.compile(r"[0-9]{1,18}")


def last_event_id(value: str | None) -> int | None:
    """Read ``Last-Event-ID``: an event id the stream sent, or empty (a 400 otherwise)."""
    if not value:
        return None
    if EVENT_ID.fullmatch(value) is None:
        raise BadRequest("Last-Event-ID must be an event id this stream sent.")
    return int(value)


def stream_response(changes: AsyncIterator[Change]) -> ServerSentEvent:
    """Answer with the changes as they come."""
    return ServerSentEvent(
        _messages(changes),
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _messages(changes: AsyncIterator[Change]) -> AsyncIterator[ServerSentEventMessage]:
    # The reconnection delay rides on the first message rather than going alone: a stream
    # cut after its first chunk has then already given the client an id to resume after.
    retry: int | None = RETRY_MS
    async for change in changes:
        if change.event is not None:
            data = _json(event_view(change.event))
            message = ServerSentEventMessage(
                data=data, event=change.event.kind, id=change.event.id, retry=retry
            )
        elif change.job is not None:
            message = ServerSentEventMessage(data=_job(change.job), event="job", retry=retry)
        else:
            # A comment alone: with a data line (even empty) an EventSource would fire an
            # empty "message" event.
            message = ServerSentEventMessage(comment="keep-alive", data=None)
        retry = None if message.retry is not None else retry
        yield message


def _job(job: JobRecord) -> str:
    return _json(job_view(job))


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
