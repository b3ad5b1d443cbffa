"""The HTTP/1.1 edge: uvicorn's httptools protocol with a header deadline, header limits and
every refusal as a problem document.

What the parser (llhttp) already does, measured over raw sockets: ``Content-Length``
together with ``Transfer-Encoding: chunked`` (either order), a bad chunk size or a bare LF is
a 400 and the connection closes (RFC 9112 §6.3). What it does not: it holds a partial
header block open for as long as the client likes and accepts any number of headers of any
size. This protocol adds those three limits; the body limit is the app's
(``max_body_bytes``, 413). The refusals are answered before the app sees the request, so
they are written as problem documents here and logged on ``onejob.edge``.

What llhttp refuses stays refused (its leniencies would let ``Name : value``, folded lines
and bare CRs through: request smuggling), but is answered as the app would answer it, not
with uvicorn's plain-text 400: a method it does not know (``FOO``) is 501, a control
character or DEL in ``Idempotency-Key`` is ``urn:onejob:invalid-idempotency-key``, anything
else ``urn:onejob:bad-request`` with llhttp's reason. llhttp says *that* a header value is
bad, not *which* header: the header is read back from this request's raw header bytes
(``refusal_for``). Requests before a refused one on the same connection (pipelined) are
answered first; the refusal follows, and the connection closes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
from dataclasses import dataclass
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from gateway.errors import BadRequest, InvalidIdempotencyKey

log = logging.getLogger("onejob.edge")

HEADER_TIMEOUT = 10.0  # seconds from a request's first byte to the end of its headers
MAX_HEADERS = 100  # header fields in one request
MAX_HEADER_BYTES = 16 * 1024  # request target plus every header name and value, in bytes
RAW_HEADER_BOUND = 4  # times MAX_HEADER_BYTES: raw bytes an incomplete header block may hold


@dataclass(frozen=True, slots=True)
class Refusal:
    """A problem document the edge answers with, before the app sees the request."""

    status: int
    type: str
    title: str
    detail: str

    def body(self) -> bytes:
        """The problem document, as ``gateway.http.responses.problem`` writes one."""
        body = {
            "type": self.type,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        }
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


HEADERS_LATE = Refusal(
    408,
    "urn:onejob:request-timeout",
    "Request Timeout",
    "The request headers did not arrive in time.",
)
HEADERS_TOO_LARGE = Refusal(
    431,
    "urn:onejob:headers-too-large",
    "Request Header Fields Too Large",
    "The request has too many or too large headers.",
)
UNKNOWN_METHOD = Refusal(
    501,
    "urn:onejob:method-not-implemented",
    "Not Implemented",
    "The request method is not one this server knows (RFC 9110 §9.1); "
    "a known method a path does not take is 405, with Allow.",
)
BAD_KEY = Refusal(
    InvalidIdempotencyKey.status,
    InvalidIdempotencyKey.type,
    InvalidIdempotencyKey.title,
    "Idempotency-Key must be printable ASCII; it carries a control character or DEL.",
)

_TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
#: A header line as sent (its CR taken off): a name, a colon, a value.
_HEADER_LINE = re.compile(rb"(" + _TOKEN + rb"):(.*)", re.DOTALL)
#: What RFC 9110 §5.5 does not allow in a field value (HTAB and obs-text are allowed).
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
#: The start of a request line: a method token and its space.
_METHOD = re.compile(_TOKEN + rb" ")
_END_OF_HEADERS = b"\r\n\r\n"


def refusal_for(error: BaseException | None, head: bytes) -> Refusal:
    """Say how to answer llhttp's ``error`` on a request whose raw bytes start in ``head``.

    ``head`` holds what the connection received from the chunk in which the refused request
    began: the request may follow others (pipelined) in it, so each request-line and header
    line in it is a candidate. The ones before the refused request were parsed, so none of
    them is at fault, unless a pipelined body is shaped like one: then the type may be wrong,
    never the status.
    """
    reason = str(error) if error is not None else "unreadable"
    if isinstance(error, httptools.HttpParserInvalidMethodError) and _unknown_method(head):
        return UNKNOWN_METHOD
    if "header value" in reason:
        name = _header_at_fault(head)
        if name is not None and name.lower() == b"idempotency-key":
            return BAD_KEY
        if name is not None:
            reason = f"{reason} in {name.decode('ascii')[:64]}"
    detail = f"The request is not valid HTTP/1.1: {reason}."
    return Refusal(BadRequest.status, BadRequest.type, BadRequest.title, detail)


def _unknown_method(head: bytes) -> bool:
    """Whether a request in ``head`` starts with a method token llhttp does not know."""
    starts = [0]
    at = head.find(_END_OF_HEADERS)
    while at != -1:
        starts.append(at + len(_END_OF_HEADERS))
        at = head.find(_END_OF_HEADERS, starts[-1])
    for start in starts:
        method = _METHOD.match(head, start)
        if method is None:
            continue
        try:
            httptools.HttpRequestParser(None).feed_data(method.group() + b"/ HTTP/1.1\r\n")
        except httptools.HttpParserInvalidMethodError:
            return True
        except httptools.HttpParserError:
            continue
    return False


def _header_at_fault(head: bytes) -> bytes | None:
    """The name of the first header line in ``head`` whose value llhttp refuses."""
    for line in head.split(b"\n"):
        field = _HEADER_LINE.fullmatch(line.removesuffix(b"\r"))
        if field is not None and _CONTROL.search(field.group(2)):
            return field.group(1)
    return None


class _HeadersTooLarge(Exception):
    """Raised inside a parser callback; the parser turns it into a parse error."""


class EdgeProtocol(HttpToolsProtocol):
    """Refuse slow (408) and oversized (431) header blocks, answer what llhttp refuses as
    problems (400, 501), then close the connection."""

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
        self._refusal: Refusal | None = None  # raised by a header limit inside the parser
        self._held: Refusal | None = None  # sent once the requests before it are answered
        self._chunk = b""  # the chunk being parsed
        self._head: list[bytes] = []  # the chunks since this request began, to its headers' end

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
        if self._held is not None:
            return  # the parser failed; only the answers before the refusal are left
        self._chunk = data
        if self._reading_headers:
            self._head.append(data)
        super().data_received(data)
        self._chunk = b""
        if self._reading_headers and not self.transport.is_closing():
            self._raw_header_bytes += len(data)
            if self._raw_header_bytes > RAW_HEADER_BOUND * self.max_header_bytes:
                self._refuse(HEADERS_TOO_LARGE)

    def on_message_begin(self) -> None:
        """Start counting a new request's header bytes, and its deadline."""
        super().on_message_begin()
        self._header_bytes = 0
        self._reading_headers = True
        self._head = [self._chunk]
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
        self._head = []
        super().on_headers_complete()

    def send_400_response(self, msg: str) -> None:
        """Answer a parse error as a problem; one raised by a header limit is a 431.

        uvicorn calls this in its ``except httptools.HttpParserError`` clause, so the
        parser's error is the exception being handled.
        """
        if self._refusal is not None:
            self._refuse(self._refusal)
            return
        self._refuse(refusal_for(sys.exception(), b"".join(self._head)))

    def on_response_complete(self) -> None:
        """Start the next pipelined request, or send the refusal that waited for them."""
        super().on_response_complete()
        if self._held is not None and not self._in_flight():
            refusal, self._held = self._held, None
            self._send(refusal)

    def _count(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > self.max_header_bytes:
            self._refuse_while_parsing()

    def _refuse_while_parsing(self) -> None:
        self._refusal = HEADERS_TOO_LARGE
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
        self._refuse(HEADERS_LATE)

    def _in_flight(self) -> bool:
        """Whether a request read in full still waits for its answer (or is queued)."""
        cycle = self.cycle
        return bool(self.pipeline) or (cycle is not None and not cycle.response_complete)

    def _refuse(self, refusal: Refusal) -> None:
        """Send ``refusal`` and close, after the answers to the requests read before it.

        A request whose body is still arriving cannot be answered once the parser failed;
        it is not waited for.
        """
        if self._held is not None or self.transport.is_closing():
            return
        cycle = self.cycle
        if self._in_flight() and (cycle is None or not cycle.more_body):
            self._held = refusal
            self.flow.pause_reading()
            return
        self._send(refusal)

    def _send(self, refusal: Refusal) -> None:
        body = refusal.body()
        head = [STATUS_LINE[refusal.status]]
        head += [
            name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers
        ]
        head += [
            b"content-type: application/problem+json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()
        client = f"{self.client[0]}:{self.client[1]}" if self.client else None
        log.info(
            "refused at the edge: %s",
            refusal.type,
            extra={"status": refusal.status, "client": client},
        )


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
