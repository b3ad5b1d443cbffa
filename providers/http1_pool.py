"""The provider client's transport: a pool of HTTP/1.1 keep-alive connections on asyncio.

httpx's own transport is httpcore: a pure-Python parser (h11) and a lock per step. The
transport before this one put aiohttp under httpx's interface; measured alone (``python -m
bench.client``) a call through it still cost about twice this one's CPU,
most of it in aiohttp's session, request and response objects, which httpx then copies
into its own (docs/benchmarks.md, fourteenth session). This transport writes the request
httpx built, as httpx built it, on an ``asyncio.Protocol`` and reads the answer with
httptools' ``HttpResponseParser`` (llhttp, Node's parser, in C; the same package uvicorn
parses requests with): one connection is ``providers.http1_connection``. What is left to
this module is the pool and the timeouts.

``Http1Transport`` is an ``httpx.AsyncBaseTransport`` (httpx's documented extension
point), so the adapters keep httpx's requests and responses and every test's
``MockTransport`` still applies. What the adapters depend on is which httpx exception a
failure raises: ``providers/json_http_adapter.py`` reads ``ConnectError``, ``ConnectTimeout`` and
``PoolTimeout`` as "not sent" (a failover may follow), everything else after the request
left as "maybe sent" (the attempt is ``unknown``). So each failure raises the class
httpcore raises for the same break point (tests/integration/providers/
test_network_backend.py runs every one of them against httpcore as the reference), and
only a failure before the first byte of the request is written is "not sent":

- a header h11 would refuse (a CR or LF in a value, a bad name, a ``Content-Length`` that
  is not a number): ``LocalProtocolError``, before a connection is even taken;
- no connection free within the pool timeout: ``PoolTimeout``; when the caller's own
  deadline fires in the same late turn of the loop and takes the cancellation, the
  ``CancelledError`` under its ``TimeoutError`` is marked (``pool_wait_expired``);
- refused, DNS, TLS handshake or certificate: ``ConnectError``; the connect timeout
  (TCP and TLS): ``ConnectTimeout``;
- the request's body not taken by the socket within the write timeout: ``WriteTimeout``;
  the connection lost while writing: ``WriteError``;
- no byte of the answer for the read timeout: ``ReadTimeout``;
- the server hung up before an answer or mid-body (FIN), sent a malformed answer, or
  a head (status line and headers) past ``MAX_HEAD`` still unfinished:
  ``RemoteProtocolError``; the connection reset while reading: ``ReadError``.

Nothing is ever sent twice: a request that fails is never retried here, as httpx never
does. A connection goes back to the pool only after a complete answer that allows it
(``Http1Connection.reusable``), and before reuse it is asked, as httpcore asks, whether
its socket is readable: an idle connection has nothing to read unless the server hung
up, and the loop may not have seen that FIN yet; sending on it would make a clean call
"maybe sent". A call cancelled (the adapters' deadline) at any point aborts its
connection, so nothing half-read goes back to the pool.

``limits.max_connections`` caps the connections open at once, idle ones included
(httpcore's meaning), ``limits.keepalive_expiry`` how long an idle one is kept;
``max_keepalive_connections`` does not apply. ``verify`` and ``trust_env`` are httpx's
and make the same TLS context (``httpx.create_ssl_context``: certifi's CA bundle, or
``SSL_CERT_FILE``), offering ALPN ``http/1.1`` as httpcore does. Proxies from the
environment stay httpx's own transports (``ProviderClient._init_transport``). Answers
are read whole (the adapters read every answer whole). Not done here: HTTP/2, client
certificates (``ProviderClient`` gives those to httpcore), ``Expect: 100-continue``,
protocol upgrades. Over TLS the SSL transport takes a whole upload
into its buffer without pausing, so a server that stops reading one ends the call with
``ReadTimeout`` where httpcore says ``WriteTimeout`` (both "maybe sent").
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from typing import Any

import httpx

from providers.http1_connection import Http1Connection, Origin, request_head

#: Set on a ``CancelledError`` that reached a caller waiting for room in the pool once
#: the pool timeout had fired too: read by ``pool_wait_expired``.
POOL_WAIT_EXPIRED = "onejob_pool_wait_expired"


def pool_wait_expired(exc: BaseException) -> bool:
    """Say whether ``exc`` (a caller's ``TimeoutError`` or the cancellation under it)
    ended a wait for room in the pool whose own timeout had fired: nothing was sent.

    A caller's deadline longer than the pool timeout can still fire in the same turn of
    a loop that ran late, after the pool's timer and before the waiting task resumed.
    The task then sees one cancellation for two timers; ``asyncio.timeout`` gives it to
    the outer one (the caller's), whose ``TimeoutError`` would read as "maybe sent".
    """
    cause: BaseException | None = exc
    while cause is not None:
        if getattr(cause, POOL_WAIT_EXPIRED, False):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


class Http1Transport(httpx.AsyncBaseTransport):
    """Send httpx requests over a pool of HTTP/1.1 keep-alive connections (module docstring)."""

    def __init__(
        self,
        limits: httpx.Limits | None = None,
        verify: ssl.SSLContext | str | bool = True,
        trust_env: bool = True,
    ) -> None:
        limits = limits or httpx.Limits()
        self.max_connections = limits.max_connections  # None: no limit
        self.keepalive_expiry = limits.keepalive_expiry
        if isinstance(verify, ssl.SSLContext):
            self._ssl = verify
        else:
            self._ssl = httpx.create_ssl_context(verify=verify, trust_env=trust_env)
            self._ssl.set_alpn_protocols(["http/1.1"])  # as httpcore offers it
        self._idle: dict[Origin, list[Http1Connection]] = {}
        self._open = 0  # connections open, idle ones included
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(
                f"the URL's scheme is not http or https: {url.scheme!r}", request=request
            )
        if isinstance(request.stream, httpx.ByteStream):
            body = request.content
            head = request_head(request, None)
        else:  # a streamed body (the adapters send none) goes as one, with its length
            body = await request.aread()
            head = request_head(request, len(body))
        timeouts = request.extensions.get("timeout", {})
        port = url.port or (443 if url.scheme == "https" else 80)
        host = url.raw_host.decode("ascii")  # IDNA-encoded, as httpx encoded it
        conn = await self._acquire((url.scheme, host, port), request, timeouts)
        try:
            response = await conn.exchange(request, head, body, timeouts)
        except BaseException:
            conn.close()
            self._release(conn)
            raise
        self._release(conn)
        return response

    async def _acquire(
        self, origin: Origin, request: httpx.Request, timeouts: dict[str, Any]
    ) -> Http1Connection:
        """A connection to ``origin``: an idle one still fit for use, or a new one once
        the pool has room (``PoolTimeout`` after the pool timeout)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeouts.get("pool") is None else loop.time() + timeouts["pool"]
        while True:
            idle = self._idle.get(origin)
            while idle:
                conn = idle.pop()
                if self._fit(conn, loop.time()):
                    return conn
                self._drop(conn)
            if self.max_connections is None or self._open < self.max_connections:
                return await self._connect(origin, request, timeouts)
            if self._drop_oldest_idle():
                continue  # room made by closing another origin's idle connection
            await self._wait_for_room(request, deadline, loop)

    def _fit(self, conn: Http1Connection, now: float) -> bool:
        expiry = self.keepalive_expiry
        return not (
            conn.closed
            or (expiry is not None and now - conn.idle_since > expiry)
            or conn.readable_while_idle()
        )

    async def _connect(
        self, origin: Origin, request: httpx.Request, timeouts: dict[str, Any]
    ) -> Http1Connection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        tls = self._ssl if scheme == "https" else None
        self._open += 1
        try:
            async with asyncio.timeout(timeouts.get("connect")):
                _, conn = await loop.create_connection(
                    lambda: Http1Connection(loop, origin),
                    host,
                    port,
                    ssl=tls,
                    server_hostname=host if tls is not None else None,
                )
        except BaseException as exc:
            self._open -= 1
            self._room_made()
            if isinstance(exc, TimeoutError):  # before OSError: TimeoutError is one
                message = str(exc) or "connect timed out"
                raise httpx.ConnectTimeout(message, request=request) from exc
            if isinstance(exc, OSError):  # refused, unreachable, DNS (gaierror), TLS (SSLError)
                raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
            raise
        return conn

    async def _wait_for_room(
        self, request: httpx.Request, deadline: float | None, loop: asyncio.AbstractEventLoop
    ) -> None:
        room: asyncio.Future[None] = loop.create_future()
        self._waiting.append(room)
        bound = asyncio.timeout_at(deadline)
        try:
            async with bound:
                await room
        except BaseException as exc:
            if room.done() and not room.cancelled():
                self._room_made()  # woken as it gave up: the room goes to the next
            elif room in self._waiting:
                self._waiting.remove(room)
            if isinstance(exc, TimeoutError):
                raise httpx.PoolTimeout("no connection free in time", request=request) from exc
            if isinstance(exc, asyncio.CancelledError) and bound.expired():
                # The pool's timer fired, and so did another cancellation (the caller's
                # deadline, on a loop late enough to run both in one turn): the
                # cancellation stays one, and says that nothing was sent.
                setattr(exc, POOL_WAIT_EXPIRED, True)
            raise

    def _release(self, conn: Http1Connection) -> None:
        """Take ``conn`` back after an exchange: idle if it may serve another, else closed."""
        if conn.reusable and not conn.closed and not self._closed:
            conn.idle_since = asyncio.get_running_loop().time()
            self._idle.setdefault(conn.origin, []).append(conn)
        else:
            self._drop(conn)
        self._room_made()

    def _drop(self, conn: Http1Connection) -> None:
        """Close ``conn`` and stop counting it as open."""
        conn.close()
        self._open -= 1

    def _drop_oldest_idle(self) -> bool:
        oldest: Http1Connection | None = None
        for conns in self._idle.values():
            if conns and (oldest is None or conns[0].idle_since < oldest.idle_since):
                oldest = conns[0]
        if oldest is None:
            return False
        self._idle[oldest.origin].remove(oldest)
        self._drop(oldest)
        return True

    def _room_made(self) -> None:
        """Wake the first caller waiting for room (it looks again)."""
        while self._waiting:
            room = self._waiting.popleft()
            if not room.done():
                room.set_result(None)
                return

    async def aclose(self) -> None:
        self._closed = True
        for conns in self._idle.values():
            for conn in conns:
                self._drop(conn)
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports' connection_lost run
