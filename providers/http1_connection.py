"""One HTTP/1.1 connection of the provider client's pool: the request written as httpx
built it, the answer parsed by httptools as it arrives.

httpx's own transport is httpcore: a pure-Python parser (h11) and a lock per step. This
connection writes the request httpx built, as httpx built it (``request_head``), on an
``asyncio.Protocol`` and reads the answer with httptools' ``HttpResponseParser`` (llhttp,
Node's parser, in C; the same package uvicorn parses requests with). The pool that owns
the connections, and the timeouts, are ``providers.http1_pool``; which httpx exception
each break point raises, and why that matters, is said there.

One request at a time. A connection is reusable only after a complete answer that allows
it (keep-alive, HTTP/1.1, no ``Connection: close`` either way, nothing more in the read
that brought it); before reuse the pool asks whether its idle socket is readable
(``readable_while_idle``, as httpcore asks). A call cancelled at any point aborts the
connection, so the rest of a long upload is not sent and nothing half-read goes back to
the pool. The parser reads what h11 reads (a bare LF ending a line, ``Content-Length``
beside chunked), so a call that ran is not lost to a parse error; answers are read whole,
and a body is decoded by httpx, by the headers it sent. Not done here: ``Expect:
100-continue``, protocol upgrades (refused as ``RemoteProtocolError``).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httptools
import httpx
from httpcore._utils import is_socket_readable

#: A request body up to this size goes out in one write with its head (one syscall for
#: a provider call); a larger one is written after it, without a copy.
ONE_WRITE = 64 * 1024  # bytes
#: The most of an answer's head read while it is unfinished, as httpcore (h11's
#: ``max_incomplete_event_size``, which httpcore sets to 100 KiB): a server that sends
#: header lines without end fails the call, rather than filling memory until the
#: deadline. A head that ends within one read passes whatever its size, as in h11; the
#: loop's reads are up to 256 KiB where httpcore's are 64 KiB, so this refuses no head
#: httpcore reads, and may read one it refuses. An informational answer's bytes do not
#: count against the final answer's head (h11 counts only what it has not parsed).
MAX_HEAD = 100 * 1024  # bytes
#: RFC 9110's token (a field name) and field value (no CR, LF, NUL or other control but
#: HTAB), as h11 checks them before httpcore sends a byte.
_NAME = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
_VALUE = re.compile(rb"[^\x00-\x08\x0a-\x1f\x7f]*")
#: The answers to a request that carry no body whatever their headers say (RFC 9110 6.4.1).
_NO_BODY = frozenset({204, 304})

Origin = tuple[str, str, int]


def request_head(request: httpx.Request, body_length: int | None) -> bytes:
    """The request line and header block as sent: the target and headers exactly as httpx
    built them (percent-escapes kept), names in the caller's case. Refuse, before
    anything is sent, what h11 would refuse (``LocalProtocolError``). ``body_length``
    replaces a streamed body's ``Transfer-Encoding`` with the length read."""
    lines = [b"%s %s HTTP/1.1\r\n" % (request.method.encode("ascii"), request.url.raw_path)]
    for name, value in request.headers.raw:
        if not _NAME.fullmatch(name):
            raise httpx.LocalProtocolError(f"Illegal header name {name!r}", request=request)
        lowered = name.lower()
        if not _VALUE.fullmatch(value) or (
            lowered == b"content-length" and not value.strip().isdigit()
        ):
            raise httpx.LocalProtocolError(f"Illegal header value {value!r}", request=request)
        if body_length is not None and lowered in (b"transfer-encoding", b"content-length"):
            continue
        lines.append(b"%s: %s\r\n" % (name, value))
    if body_length is not None:
        lines.append(b"Content-Length: %d\r\n" % body_length)
    lines.append(b"\r\n")
    return b"".join(lines)


class Http1Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: a request at a time, its answer parsed as it arrives."""

    def __init__(self, loop: asyncio.AbstractEventLoop, origin: Origin) -> None:
        self.loop = loop
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.reusable = False
        self._parser = httptools.HttpResponseParser(self)
        # Read what h11 reads (so a call that ran is not lost to a parse error): lines
        # ended by a bare LF, and Content-Length beside chunked (the chunks frame the
        # body; such a connection is not reused, ``on_message_complete``).
        self._parser.set_dangerous_leniencies(
            lenient_optional_cr_before_lf=True, lenient_chunked_length=True
        )
        self._request: httpx.Request | None = None
        self._answer: asyncio.Future[httpx.Response] | None = None
        self._writing = False  # the request is still going out
        self._paused = False
        self._drained: asyncio.Future[None] | None = None
        self._received = False  # a byte of the answer arrived
        self._last_read = 0.0
        self._read_timeout: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._head_only = False
        self._close_asked = False  # the request said ``Connection: close``
        self._informational = False  # the read being parsed ended an informational answer
        self._reset()

    def _reset(self) -> None:
        self._reason = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._headers_done = False
        self._head_read = 0  # bytes of reads that ended with the head unfinished
        self._framed = False  # Content-Length or chunked: the body's end is in the stream
        self._length = False
        self._chunked = False

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if self._answer is None or self._answer.done():
            self.reusable = False  # bytes while idle: garbage or a late answer; drop it
            self.close()
            return
        self._received = True
        self._last_read = self.loop.time()
        self._informational = False
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(httpx.RemoteProtocolError("the server upgraded the connection"))
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"malformed answer: {exc}"))
            return
        # A read that ended an informational answer is not counted: how much of it was
        # the final answer's head is not known, and h11 counts only that.
        if not self._headers_done and not self._answer.done() and not self._informational:
            self._head_read += len(data)
            if self._head_read > MAX_HEAD:
                self._fail(httpx.RemoteProtocolError("the answer's head is too long"))

    def eof_received(self) -> bool:
        return False  # close; connection_lost says what it meant

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        self._wake_writer()
        answer = self._answer
        if answer is None or answer.done():
            return
        if exc is None and self._headers_done and not self._framed:
            self.on_message_complete()  # no length, not chunked: the body ran to the close
            return
        if self._writing:
            self._fail(httpx.WriteError(str(exc or "the server closed the connection")))
        elif exc is not None:
            self._fail(httpx.ReadError(str(exc) or type(exc).__name__))
        elif not self._received:
            self._fail(httpx.RemoteProtocolError("Server disconnected without sending a response."))
        else:
            self._fail(
                httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body"
                )
            )

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_writer()

    # -- httptools' callbacks -----------------------------------------------------------

    def on_status(self, reason: bytes) -> None:
        self._reason += reason

    def on_message_begin(self) -> None:
        answer = self._answer
        if answer is not None and answer.done():
            # Another message right behind the answer, in the same read: never hand the
            # rest of it to the next request as its answer.
            self.reusable = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))
        lowered = name.lower()
        if lowered == b"content-length":
            self._framed = self._length = True
        elif lowered == b"transfer-encoding" and b"chunked" in value.lower():
            self._framed = self._chunked = True

    def on_headers_complete(self) -> None:
        self._headers_done = True
        status = self._parser.get_status_code()
        if status in _NO_BODY or 100 <= status < 200:
            self._framed = True
        if self._head_only and status >= 200:
            self.reusable = False  # llhttp would wait for a body a HEAD answer lacks
            self.on_message_complete()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        answer = self._answer
        if answer is None or answer.done():
            return
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # informational (no 101 here: an upgrade is refused)
            self._informational = True
            self._reset()
            return
        version = self._parser.get_http_version()
        if not self._head_only:
            self.reusable = (
                not self.closed
                and version == "1.1"  # as h11: an HTTP/1.0 server's keep-alive is not trusted
                and self._parser.should_keep_alive()
                and not (self._length and self._chunked)
                and not self._close_asked
            )
        answer.set_result(
            httpx.Response(
                status,
                headers=self._headers,
                stream=httpx.ByteStream(b"".join(self._body)),
                extensions={
                    "http_version": b"HTTP/" + version.encode("ascii"),
                    "reason_phrase": self._reason,
                },
                request=self._request,
            )
        )

    # -- one exchange -------------------------------------------------------------------

    def _fail(self, exc: httpx.TransportError) -> None:
        self.reusable = False
        answer = self._answer
        if answer is not None and not answer.done():
            exc.request = self._request  # type: ignore[assignment]
            answer.set_exception(exc)
        self.close()

    def _wake_writer(self) -> None:
        drained = self._drained
        if drained is not None and not drained.done():
            drained.set_result(None)

    def _read_timer(self) -> None:
        """Fire the read timeout, or set it again from the last byte read."""
        assert self._read_timeout is not None
        due = self._last_read + self._read_timeout
        if self.loop.time() < due:
            self._timer = self.loop.call_at(due, self._read_timer)
            return
        self._timer = None
        self._fail(httpx.ReadTimeout("no answer within the read timeout"))

    async def exchange(
        self, request: httpx.Request, head: bytes, body: bytes, timeouts: dict[str, Any]
    ) -> httpx.Response:
        """Send one request and read its whole answer; raise httpx's exception otherwise."""
        assert self.transport is not None
        self._request = request
        self._head_only = request.method == "HEAD"
        self._close_asked = any(
            n.lower() == b"connection" and b"close" in v.lower() for n, v in request.headers.raw
        )
        self._received = False
        self.reusable = False
        self._reset()
        answer: asyncio.Future[httpx.Response] = self.loop.create_future()
        self._answer = answer
        self._writing = True
        try:
            self._send(head, body)
            if self._paused and not answer.done():
                await self._drain(request, timeouts.get("write"))
            self._writing = False
            self._read_timeout = timeouts.get("read")
            if self._read_timeout is not None and not answer.done():
                self._last_read = self.loop.time()
                self._timer = self.loop.call_at(
                    self._last_read + self._read_timeout, self._read_timer
                )
            return await answer
        finally:
            if not answer.done():
                answer.cancel()  # given up: what the close reports goes nowhere
            elif not answer.cancelled():
                answer.exception()  # failed while the write was waited for: seen here
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._request = None

    def _send(self, head: bytes, body: bytes) -> None:
        assert self.transport is not None
        if len(body) <= ONE_WRITE:
            self.transport.write(head + body)
        else:
            self.transport.write(head)
            self.transport.write(body)

    async def _drain(self, request: httpx.Request, timeout: float | None) -> None:
        """Wait for the socket to take the body down to its low-water mark (or the
        connection to be lost, which fails the answer with ``WriteError``)."""
        self._drained = self.loop.create_future()
        try:
            async with asyncio.timeout(timeout):
                await self._drained
        except TimeoutError as exc:
            raise httpx.WriteTimeout("the request was not taken in time", request=request) from exc
        finally:
            self._drained = None

    def readable_while_idle(self) -> bool:
        """Say whether the idle socket has something to read (EOF or garbage)."""
        assert self.transport is not None
        sock = self.transport.get_extra_info("socket")
        return sock is not None and is_socket_readable(sock)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()  # nothing buffered goes out; RST if anything was left
