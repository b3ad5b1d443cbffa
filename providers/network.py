"""httpcore's network layer on asyncio itself, for the provider client.

httpx reaches the network through httpcore, which on asyncio goes through anyio: every
read and write enters an anyio cancel scope, and before each request and after each
response the pool asks every idle connection whether its socket is readable (a server
that hung up), through anyio's typed attributes and a ``poll`` per connection. py-spy
put that at a tenth of the gateway's CPU per sync job (docs/benchmarks.md).

``AsyncioBackend`` is an ``httpcore.AsyncNetworkBackend`` (httpcore's documented
extension point) over an ``asyncio.Protocol``. For each failure below it raises the class
httpcore's anyio backend raises, so the adapters' classification of a failure
(``providers/transport.py``: not sent, or maybe sent) does not change; ``ConnectError``
and ``ConnectTimeout`` come only from connecting and the TLS handshake, before any byte of
a request:

- connecting: ``ConnectTimeout``, or ``ConnectError`` for any ``OSError``;
- TLS: ``ConnectTimeout``, or ``ConnectError`` for a TLS or socket error;
- reading: ``ReadTimeout``; ``ReadError`` when the connection broke; ``b""`` at EOF;
- writing: ``WriteTimeout``; ``WriteError`` when the connection is gone.

"Is this idle connection readable?" is answered from what the protocol already knows
(bytes buffered, EOF, connection lost) and, as the anyio backend does, from a ``poll``
of the socket, so a hang-up the loop has not yet read is still seen.
"""

from __future__ import annotations

import asyncio
import http.cookiejar
import socket
import ssl
from collections.abc import Iterable
from typing import Any, cast

import httpcore
import httpx
from httpcore._backends.base import SOCKET_OPTION
from httpcore._utils import is_socket_readable

#: Stop reading from the socket while this much is buffered and not yet asked for.
READ_HIGH_WATER = 256 * 1024  # bytes


class _Protocol(asyncio.Protocol):
    """Buffer what arrives; wake the one reader or writer that waits."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.lost = False
        self.error: BaseException | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._read_waiter: asyncio.Future[None] | None = None
        self._drain_waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > READ_HIGH_WATER and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake_reader()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake_reader()
        return False  # let the transport close itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.error = exc
        self._wake_reader()
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _wake_reader(self) -> None:
        waiter, self._read_waiter = self._read_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def take(self, max_bytes: int) -> bytes:
        data = bytes(self.buffer[:max_bytes])
        del self.buffer[:max_bytes]
        if self._reading_paused and len(self.buffer) <= READ_HIGH_WATER // 4:
            self._reading_paused = False
            if self.transport is not None and not self.lost:
                self.transport.resume_reading()
        return data

    async def wait_readable(self, timeout: float | None) -> None:
        self._read_waiter = asyncio.get_running_loop().create_future()
        await _wait(self._read_waiter, timeout)

    async def wait_drained(self, timeout: float | None) -> None:
        self._drain_waiter = asyncio.get_running_loop().create_future()
        await _wait(self._drain_waiter, timeout)

    @property
    def writing_paused(self) -> bool:
        return self._writing_paused


async def _wait(waiter: asyncio.Future[None], timeout: float | None) -> None:
    """Await ``waiter``; raise ``TimeoutError`` after ``timeout`` seconds (None: never)."""
    if timeout is None:
        await waiter
        return
    if timeout <= 0:
        raise TimeoutError
    timer = asyncio.get_running_loop().call_later(timeout, _expire, waiter)
    try:
        await waiter
    finally:
        timer.cancel()
        if waiter.done() and not waiter.cancelled():
            waiter.exception()  # retrieved: a timeout beaten by a cancel is not logged


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class AsyncioStream(httpcore.AsyncNetworkStream):
    """One connection (TCP, or TLS over it)."""

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._sock: Any = transport.get_extra_info("socket")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        protocol = self._protocol
        while True:
            if protocol.buffer:
                return protocol.take(max_bytes)
            if protocol.eof or (protocol.lost and protocol.error is None):
                return b""
            if protocol.lost:
                raise httpcore.ReadError(str(protocol.error)) from protocol.error
            try:
                await protocol.wait_readable(timeout)
            except TimeoutError as exc:
                raise httpcore.ReadTimeout(str(exc)) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        protocol = self._protocol
        if protocol.lost or self._transport.is_closing():
            raise httpcore.WriteError(str(protocol.error or "the connection is closed"))
        self._transport.write(buffer)
        while protocol.writing_paused and not protocol.lost:
            try:
                await protocol.wait_drained(timeout)
            except TimeoutError as exc:
                raise httpcore.WriteTimeout(str(exc)) from exc
        if protocol.lost and protocol.error is not None:
            raise httpcore.WriteError(str(protocol.error)) from protocol.error

    async def aclose(self) -> None:
        # Cut the connection, as the anyio backend does: a graceful close would go on
        # sending a request body the caller has given up on, with no time limit.
        self._transport.abort()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport = await loop.start_tls(
                    self._transport,
                    self._protocol,
                    ssl_context,
                    server_hostname=server_hostname,
                )
        except TimeoutError as exc:
            self._transport.close()
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except (OSError, ssl.SSLError, EOFError) as exc:
            self._transport.close()
            raise httpcore.ConnectError(str(exc)) from exc
        if transport is None:  # the connection closed during the handshake
            self._transport.abort()
            raise httpcore.ConnectError("the connection closed during the TLS handshake")
        self._protocol.transport = transport  # flow control acts on the TLS layer now
        return AsyncioStream(transport, self._protocol)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            protocol = self._protocol
            if protocol.buffer or protocol.eof or protocol.lost or self._transport.is_closing():
                return True  # (uvloop closes the fd before it calls connection_lost)
            return self._sock is not None and is_socket_readable(self._sock)
        if info == "ssl_object":
            return self._transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        if info == "socket":
            return self._sock
        return None


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """Open connections with the running loop (uvloop under ``onejob serve``)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        return await self._connect(
            lambda: loop.create_connection(_Protocol, host, port, local_addr=local),
            timeout,
            socket_options,
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        return await self._connect(
            lambda: loop.create_unix_connection(_Protocol, path), timeout, socket_options
        )

    async def _connect(
        self, opener: Any, timeout: float | None, options: Iterable[SOCKET_OPTION] | None
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await opener()
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        sock: socket.socket | None = transport.get_extra_info("socket")
        try:
            for option in options or ():
                if sock is not None:
                    sock.setsockopt(*option)
        except OSError as exc:
            transport.abort()
            raise httpcore.ConnectError(str(exc)) from exc
        return AsyncioStream(transport, protocol)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _KeepNothing(http.cookiejar.CookieJar):
    """A cookie jar that stores nothing, however a cookie is offered to it."""

    def set_cookie(self, cookie: http.cookiejar.Cookie) -> None:
        """Keep no cookie."""

    def extract_cookies(self, response: Any, request: Any) -> None:
        """Keep no cookie of a response."""

    def add_cookie_header(self, request: Any) -> None:
        """Add no Cookie header."""


class NoCookies(httpx.Cookies):
    """Cookies that keep nothing and send nothing.

    A provider API is not a browser session, and one client serves every owner's jobs: a
    cookie one answer sets (a CDN's bot-management cookie, say) must not ride along on
    the next owner's request. It is also cheaper: httpx wraps every response and its
    request in urllib objects to offer them to the jar (3 % of the gateway's samples per
    sync job, docs/benchmarks.md), which these two methods skip. The jar underneath keeps
    nothing either (``update`` and ``set`` write to it directly).
    """

    def __init__(self) -> None:
        super().__init__(_KeepNothing())

    def extract_cookies(self, response: httpx.Response) -> None:
        """Keep no cookie of ``response``."""

    def set_cookie_header(self, request: httpx.Request) -> None:
        """Send no cookie with ``request``."""


class ProviderClient(httpx.AsyncClient):
    """``httpx.AsyncClient`` whose cookie jar is ``NoCookies``, with a one-hop ``post_read``."""

    _no_cookies = NoCookies()

    @property
    def cookies(self) -> httpx.Cookies:
        return self._no_cookies

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        """Ignore: this client keeps no cookies."""

    def sends_in_one_hop(self) -> bool:
        """Say whether ``post_read`` is ``post`` here: no auth, no event hook, no redirect."""
        hooks = self.event_hooks
        return (
            self.auth is None
            and not self.follow_redirects
            and not hooks["request"]
            and not hooks["response"]
        )

    async def post_read(
        self, url: str, *, content: bytes, headers: dict[str, str], timeout: httpx.Timeout
    ) -> httpx.Response:
        """POST ``content`` and read the whole answer, as ``post`` does, in one hop.

        ``AsyncClient.send`` takes a request through its auth flow, its redirect loop, the
        cookie jar, the event hooks and a stream wrapper that times the body, each a
        generator or a coroutine of its own; py-spy put those layers at 7 % of a sync
        job's CPU (docs/benchmarks.md). A provider client has no auth (the key is a
        header), follows no redirect, keeps no cookie and, unless someone added one, has
        no hook (``sends_in_one_hop``; the adapters call ``post`` otherwise). What is left
        is ``send``'s one hop, unchanged: the same ``build_request`` (headers, timeout),
        the transport ``_transport_for_url`` picks (so a proxy from the environment and a
        test's mock transport still apply), and the same exceptions out of it, with their
        ``request``. Credentials in the URL (``https://user:pw@host/v1``) need ``send``'s
        auth step, which turns them into Basic auth, so such a URL goes through ``send``.
        Not done here, and read by nothing here: ``Response.elapsed``, httpx's INFO line
        per request, and ``next_request`` on a redirect (none is followed anyway).
        """
        if self.is_closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        request = self.build_request("POST", url, content=content, headers=headers, timeout=timeout)
        if request.url.userinfo:
            return await self.send(request)  # reads the whole body, as ``post`` does
        transport = self._transport_for_url(request.url)
        try:
            response = await transport.handle_async_request(request)
        except httpx.RequestError as exc:
            exc.request = request  # as ``send`` attaches it
            raise
        response.request = request
        try:
            await response.aread()
        finally:
            await response.aclose()
        return response


def provider_client(
    limits: httpx.Limits, transport: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncClient:
    """Return the ``httpx.AsyncClient`` the provider adapters share (``ProviderClient``).

    Its own transport connects through ``AsyncioBackend``; a ``transport`` given (a test's
    ``MockTransport``) is used as it is. Proxies from the environment keep httpx's own
    transports. It keeps no cookies (``NoCookies``).
    """
    client = ProviderClient(transport=transport, limits=limits)
    if transport is None:
        use_asyncio_backend(client._transport)
    return client


def use_asyncio_backend(transport: Any) -> bool:
    """Make an ``httpx.AsyncHTTPTransport``'s pool connect through ``AsyncioBackend``.

    httpx does not pass a network backend through, so its pool's attribute is set; say
    whether it was there (an httpx that stored it elsewhere keeps anyio's, which works).
    """
    pool = getattr(transport, "_pool", None)
    if not isinstance(pool, httpcore.AsyncConnectionPool) or not hasattr(pool, "_network_backend"):
        return False
    pool._network_backend = AsyncioBackend()
    return True
