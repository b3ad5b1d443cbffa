"""Decode a ``text/event-stream`` body, bytes in, events out (no I/O).

The rules are the WHATWG HTML standard's "event stream interpretation": lines end in CRLF,
LF or CR (a CR at the end of one chunk and an LF at the start of the next are one line
end); a line starting with ``:`` is a comment (the server's heartbeat); ``field: value``
with one optional space after the colon; ``data`` lines join with LF; an empty line
dispatches the event, unless it has no data; ``id`` sets the last event id, which stays
set for later events and is what a reconnection sends as ``Last-Event-ID`` (an id with a
NUL is ignored); ``retry`` (digits only) sets the reconnection delay in milliseconds; an
event cut off by the end of the stream is dropped.
"""

from __future__ import annotations

import codecs
import dataclasses
import json
from typing import Any

#: The media type of an event stream, as sent in ``Accept`` and checked in ``Content-Type``.
EVENT_STREAM = "text/event-stream"


@dataclasses.dataclass(frozen=True, slots=True)
class ServerSentEvent:
    """One dispatched event."""

    event: str = "message"  #: the ``event:`` field, ``message`` when absent
    data: str = ""  #: the ``data:`` lines joined with LF
    id: str = ""  #: the last event id when this event was dispatched
    retry: int | None = None  #: the reconnection delay in ms, when the stream set one

    def json(self) -> Any:
        """Return ``data`` parsed as JSON (``None`` when it is not JSON)."""
        try:
            return json.loads(self.data)
        except ValueError:
            return None


class SSEDecoder:
    """Turn chunks of an event stream into events; keep the last event id and retry."""

    def __init__(self, last_event_id: str = "") -> None:
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._started = False  # a BOM is skipped only at the very start
        self._after_cr = False  # the last chunk ended in CR: an LF now ends nothing
        self._event = ""
        self._data: list[str] = []
        self.last_event_id = last_event_id
        self.retry: int | None = None  #: ms, from the last valid ``retry:`` field
        self.comments = 0  #: comment lines seen (heartbeats)

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Decode ``chunk`` and return the events it completed."""
        text = self._text.decode(chunk)
        if not self._started and text:
            self._started = True
            text = text.removeprefix("\ufeff")
        if not text:
            return []
        if self._after_cr and text.startswith("\n"):
            text = text[1:]
        self._after_cr = text.endswith("\r")
        self._buffer += text
        events: list[ServerSentEvent] = []
        while True:
            end = _line_end(self._buffer)
            if end is None:
                return events
            index, width = end
            line, self._buffer = self._buffer[:index], self._buffer[index + width :]
            event = self._line(line)
            if event is not None:
                events.append(event)

    def _line(self, line: str) -> ServerSentEvent | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            self.comments += 1
            return None
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
        elif field == "id":
            if "\0" not in value:
                self.last_event_id = value
        elif field == "retry":
            if value.isascii() and value.isdigit():
                self.retry = int(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        data, event = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        return ServerSentEvent(event or "message", "\n".join(data), self.last_event_id, self.retry)


def _line_end(buffer: str) -> tuple[int, int] | None:
    """Return where the first line of ``buffer`` ends and how long its line end is."""
    cr, lf = buffer.find("\r"), buffer.find("\n")
    if cr == -1 and lf == -1:
        return None
    if cr == -1 or (lf != -1 and lf < cr):
        return lf, 1
    if cr == len(buffer) - 1:
        # A CR at the end may be half of a CRLF still in flight: end the line here and
        # let ``feed`` drop the LF when it arrives.
        return cr, 1
    return cr, 2 if buffer[cr + 1] == "\n" else 1
