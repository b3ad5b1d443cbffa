"""The HTTP/1.1 edge: uvicorn's httptools protocol with a header deadline and header limits.

What the parser (llhttp) already does, measured over raw sockets: ``Content-Length``
together with ``Transfer-Encoding: chunked`` (either order), a bad chunk size or a bare LF is
a 400 and the connection closes (RFC 9112 §6.3). What it does not: it holds a partial
header block open for as long as the client likes and accepts any number of headers of any
size. This protocol adds those three limits; the body limit is the app's
(``max_body_bytes``, 413). The refusals are answered before the app sees the request, so
they are written as problem documents here and logged on ``onejob.edge``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

log = logging.getLogger("onejob.edge")

HEADER_TIMEOUT = 10.0  # seconds from a request's first byte to the end of its headers
MAX_HEADERS = 100  # header fields in one request
MAX_HEADER_BYTES = 16 * 1024  # request target plus every header name and value, in bytes
RAW_HEADER_BOUND = 4  # times MAX_HEADER_BYTES: raw bytes an incomplete header block may hold

_REFUSALS = {
    408: ("urn:onejob:request-timeout", "The request headers did not arrive in time."),
    431: ("urn:onejob:headers-too-large", "The request has too many or too large headers."),
}


class _HeadersTooLarge(Exception):
    """Raised inside a parser callback; the parser turns it into a parse error."""


class EdgeProtocol(HttpToolsProtocol):
    """Refuse slow (408) and oversized (431) header blocks, then close the connection."""

    header_timeout = HEADER_TIMEOUT
    max_headers = MAX_HEADERS
    max_header_bytes = MAX_HEADER_BYTES
    #: Send a turn's writes at its end (``OneWritePerTurn``, shortcut ``write_batching``).
    write_batching = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_deadline: asyncio.TimerHandle | None = None
        self._header_bytes = 0  # exact: target, names and values of this request
        self._raw_header_bytes = 0  # bytes read while this request's headers are incomplete
        self._reading_headers = True
        self._refusal: int | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the header deadline as the connection opens (a silent client is slow too);
        a turn's writes go out at its end (``OneWritePerTurn``)."""
        super().connection_made(transport)
        if self.write_batching:
            self.transport = OneWritePerTurn(transport, self.loop)  # type: ignore[assignment]
        self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        """Drop the deadline with the connection."""
        self._disarm_header_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Parse, then bound what a still-incomplete header block has buffered.

        httptools hands a header over only once it ends, so one endless header value
        would otherwise grow in memory until the deadline. The count may include the end
        of a previous pipelined body, hence the generous bound.
        """
        super().data_received(data)
        if self._reading_headers and not self.transport.is_closing():
            self._raw_header_bytes += len(data)
            if self._raw_header_bytes > RAW_HEADER_BOUND * self.max_header_bytes:
                self._refuse(431)

    def on_message_begin(self) -> None:
        """Start counting a new request's header bytes, and its deadline."""
        super().on_message_begin()
        self._header_bytes = 0
        self._reading_headers = True
        self._arm_header_deadline()

    def on_url(self, url: bytes) -> None:
        """Count the request target against the header bytes."""
        super().on_url(url)
        self._count(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        """Count one header field against the count and the bytes."""
        super().on_header(name, value)
        self._count(len(name) + len(value))
        if len(self.headers) > self.max_headers:
            self._refuse_while_parsing()

    def on_headers_complete(self) -> None:
        """The headers arrived in time: the app's timeouts take over."""
        self._disarm_header_deadline()
        self._reading_headers = False
        self._raw_header_bytes = 0
        super().on_headers_complete()

    def send_400_response(self, msg: str) -> None:
        """Answer a parse error; one raised by a header limit is a 431."""
        if self._refusal is None:
            super().send_400_response(msg)
        else:
            self._refuse(self._refusal)

    def _count(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > self.max_header_bytes:
            self._refuse_while_parsing()

    def _refuse_while_parsing(self) -> None:
        self._refusal = 431
        raise _HeadersTooLarge

    def _arm_header_deadline(self) -> None:
        if self._header_deadline is None:
            self._header_deadline = self.loop.call_later(self.header_timeout, self._headers_late)

    def _disarm_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_late(self) -> None:
        self._header_deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # A pipelined request waits behind one in flight; its clock starts after it.
            self._arm_header_deadline()
            return
        self._refuse(408)

    def _refuse(self, status: int) -> None:
        kind, detail = _REFUSALS[status]
        title = STATUS_LINE[status].decode().split(" ", 2)[2].strip()
        body = json.dumps({"type": kind, "title": title, "status": status, "detail": detail})
        head = [STATUS_LINE[status]]
        head += [
            name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers
        ]
        head += [
            b"content-type: application/problem+json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body.encode())
        self.transport.close()
        client = f"{self.client[0]}:{self.client[1]}" if self.client else None
        log.info("refused at the edge: %s", kind, extra={"status": status, "client": client})


class PlainEdgeProtocol(EdgeProtocol):
    """The edge's limits, each write sent as uvicorn sends it (``write_batching`` off)."""

    write_batching = False


def edge_protocol(write_batching: bool) -> type[EdgeProtocol]:
    """Return the protocol class uvicorn is given (``[shortcuts] write_batching``)."""
    return EdgeProtocol if write_batching else PlainEdgeProtocol


class OneWritePerTurn:
    """A connection's transport that sends what one loop turn wrote, at the turn's end.

    uvicorn writes each response as soon as the handler sends it: under load, one
    ``send`` call for its head and one for its body, each waking the client (and, on a
    2-core host, often preempting the gateway for it) in the middle of the turn that
    runs the other requests' handlers. Held to the end of the turn, a one-piece answer
    goes in one write, after the turn's work. Side by side (creation, 16 connections, 6
    rounds, docs/benchmarks.md): 1.17x the req/s at 0.92x the gateway's CPU per
    request; sending the head with the body, but at once, bought nothing. Writes go out
    in order, at the end of the turn or before a ``close``; a streamed body's pieces go
    as they come, one turn later at most. Everything else is the transport's.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Hold ``data`` (a copy: the caller may reuse a buffer) to the end of the turn."""
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(bytes(data))

    def flush(self) -> None:
        """Send what is held, in one write."""
        held, self._held = self._held, []
        if held and not self._transport.is_closing():
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        """Send what is held, then close."""
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
