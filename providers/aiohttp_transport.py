"""The provider client's transport: httpx's interface over aiohttp's connection pool.

httpx's own transport is httpcore: a pure-Python HTTP/1.1 parser (h11), a pool that walks
every connection on each request and each response close, and a lock per step that yields
to the loop. Measured alone (``python -m scenarios.load.client_bench``) it cost three to
four times aiohttp's CPU per call, more as calls run concurrently (docs/benchmarks.md).
aiohttp parses with llhttp in C and keeps its pool in a deque.

``AiohttpTransport`` is an ``httpx.AsyncBaseTransport`` (httpx's documented extension
point), so the adapters keep httpx's requests and responses and every test's
``MockTransport`` still applies. What the adapters depend on is which httpx exception a
failure raises: ``providers/transport.py`` reads ``ConnectError``, ``ConnectTimeout`` and
``PoolTimeout`` as "not sent" (a failover may follow), everything else after the request
left as "maybe sent" (the attempt is ``unknown``). So each aiohttp failure is mapped here
to the class httpcore raises for the same break point, and only failures aiohttp raises
before a byte of the request is written count as "not sent":

- aiohttp's connector errors (refused, DNS, TLS handshake or certificate), raised while
  opening a connection: ``ConnectError``;
- its connect timeout, raised while waiting for a pool slot or connecting:
  ``ConnectTimeout``;
- no byte of the answer within the read timeout: ``ReadTimeout``;
- the server hung up before an answer or mid-body, or sent a malformed answer:
  ``RemoteProtocolError`` (httpcore says ``ReadError`` for a reset mid-body; aiohttp does
  not tell a reset from a close there, and the adapters read both as "maybe sent");
- a socket error after connecting (a reset while sending, say): ``ReadError``;
- any other aiohttp error: ``RemoteProtocolError``, "maybe sent";
- a header h11 would refuse (a CR or LF in a value, a space in a name, a
  ``Content-Length`` that is not a number): refused here, before anything is sent, with
  h11's ``LocalProtocolError``.

Two of aiohttp's habits are switched off: it re-quotes the URL (``%3A`` in a Gemini model
name would go out as ``:``), so the URL httpx built goes as it is; and it sends an
idempotent request again after a connection broke, which httpx never does.

A connection taken from the pool is first asked, as httpcore asks, whether its socket is
readable: an idle connection has nothing to read unless the server hung up, and the loop
may not have seen that FIN yet. Sending on it would make a clean call "maybe sent".
``_CheckedConnector._get`` overrides a private method of aiohttp's ``BaseConnector``
(async and returning a ``Connection`` since 3.12); the pin in pyproject.toml and
tests/integration/providers/test_network_backend.py guard it.

Proxies from the environment stay httpx's: ``ProviderClient`` makes this its default
transport (``_init_transport``), so httpx still mounts its own proxy transports from the
environment and ``_transport_for_url`` routes such a URL to them; aiohttp is told to
trust no environment of its own.
"""

from __future__ import annotations

import asyncio
import io
import re
import ssl
from typing import Any

import aiohttp
import httpx
import yarl
from httpcore._utils import is_socket_readable

#: A response head line or field may be this long (aiohttp's default is 8 KiB, h11's
#: whole head 16 KiB); a provider's long header must not turn a finished call into a
#: parse error after the request was sent.
MAX_HEAD_FIELD = 64 * 1024  # bytes
#: aiohttp writes a ``bytes`` body in one piece and warns above 1 MiB; a larger one is
#: given as a file, which it writes in chunks with the loop running between them.
ONE_PIECE_BODY = 1024 * 1024  # bytes
#: Response header fields (aiohttp 3.14 refuses more than 128 by default; h11 counts
#: none): past the limit a call that completed would come back "maybe sent".
MAX_HEADERS = 1024


#: RFC 9110's token (a field name) and field value (no CR, LF, NUL or other control but
#: HTAB), as h11 checks them before httpcore sends a byte; aiohttp would send a bad name
#: and refuse a CR or LF with a bare ``ValueError``.
_NAME = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
_VALUE = re.compile(rb"[^\x00-\x08\x0a-\x1f\x7f]*")


def _headers(request: httpx.Request) -> list[tuple[str, str]]:
    """The request's headers as sent, names in the caller's case; refuse, before anything
    is sent, what h11 would refuse (``LocalProtocolError``): a bad name or value, or a
    ``Content-Length`` that is not a number (aiohttp would raise a bare ``ValueError``)."""
    out = []
    encoding = request.headers.encoding
    for name, value in request.headers.raw:
        if not _NAME.fullmatch(name):
            raise httpx.LocalProtocolError(f"Illegal header name {name!r}", request=request)
        if not _VALUE.fullmatch(value) or (
            name.lower() == b"content-length" and not value.strip().isdigit()
        ):
            raise httpx.LocalProtocolError(f"Illegal header value {value!r}", request=request)
        out.append((name.decode("latin-1"), value.decode(encoding)))
    return out


class _CheckedConnector(aiohttp.TCPConnector):
    """aiohttp's pool, which drops an idle connection the server has hung up on."""

    async def _get(self, key: Any, traces: list[Any]) -> Any:
        while True:
            connection = await super()._get(key, traces)
            if connection is None:
                return None
            transport = connection.transport
            sock = transport.get_extra_info("socket") if transport is not None else None
            if sock is None or not is_socket_readable(sock):
                return connection
            connection.close()  # readable while idle: EOF or garbage; never reuse it


def _timeout(request: httpx.Request) -> aiohttp.ClientTimeout:
    """httpx's per-request timeouts as aiohttp's.

    ``pool`` bounds waiting for a slot and connecting (aiohttp's ``connect``; running out
    of it is ``ConnectTimeout`` here, where httpcore says ``PoolTimeout``: both "not
    sent"), ``connect`` the TCP and TLS handshakes (``sock_connect``), ``read`` the wait
    for each piece of the answer (``sock_read``, which starts once the body is written).
    aiohttp has no write timeout: an upload that stalls is bounded by the adapters'
    deadline around the call (``asyncio.timeout``), and ends "maybe sent" as httpx's
    ``WriteTimeout`` does.
    """
    t = request.extensions.get("timeout", {})
    return aiohttp.ClientTimeout(
        total=None, connect=t.get("pool"), sock_connect=t.get("connect"), sock_read=t.get("read")
    )


def _as_httpx(exc: aiohttp.ClientError, request: httpx.Request) -> httpx.TransportError:
    """The httpx exception httpcore raises for the failure aiohttp raised as ``exc``."""
    message = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(message, request=request)
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(message, request=request)
    if isinstance(exc, aiohttp.SocketTimeoutError):
        return httpx.ReadTimeout(message, request=request)
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return httpx.RemoteProtocolError(message, request=request)
    if isinstance(exc, aiohttp.ClientOSError):
        return httpx.ReadError(message, request=request)
    return httpx.RemoteProtocolError(message, request=request)


class AiohttpTransport(httpx.AsyncBaseTransport):
    """Send httpx requests over one aiohttp ``ClientSession`` (HTTP/1.1, keep-alive).

    ``limits.max_connections`` caps the connections in use at once (aiohttp has no
    separate cap on idle ones: ``max_keepalive_connections`` does not apply),
    ``limits.keepalive_expiry`` how long an idle one is kept. ``verify``
    and ``trust_env`` are httpx's and make the same TLS context
    (``httpx.create_ssl_context``: certifi's CA bundle, or ``SSL_CERT_FILE``). The session
    is made on the first request, on the loop that sends it, and closed by ``aclose``
    (the client's).
    """

    def __init__(
        self,
        limits: httpx.Limits | None = None,
        verify: ssl.SSLContext | str | bool = True,
        trust_env: bool = True,
    ) -> None:
        limits = limits or httpx.Limits()
        self._limit = limits.max_connections or 0  # aiohttp: 0 is no limit
        self._keepalive = limits.keepalive_expiry
        if isinstance(verify, ssl.SSLContext):
            self._ssl = verify
        else:
            self._ssl = httpx.create_ssl_context(verify=verify, trust_env=trust_env)
            self._ssl.set_alpn_protocols(["http/1.1"])  # as httpcore offers it
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        connector = _CheckedConnector(
            limit=self._limit,
            limit_per_host=0,
            keepalive_timeout=self._keepalive,
            ssl=self._ssl,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,  # httpx decodes, by the headers it sent
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
            max_line_size=MAX_HEAD_FIELD,
            max_field_size=MAX_HEAD_FIELD,
            max_headers=MAX_HEADERS,
        )
        # aiohttp sends a GET, PUT or DELETE again, once, on a fresh connection when the
        # first one broke after sending: a second request httpx would not send, and a
        # call the adapters must see as "maybe sent". (Private; aiohttp's own test
        # utilities set it the same way.)
        self._session._retry_connection = False
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(
                f"the URL's scheme is not http or https: {request.url.scheme!r}", request=request
            )
        headers = _headers(request)
        session = self._session or self._open()
        if isinstance(request.stream, httpx.ByteStream):
            content = request.content
        else:  # a streamed body (the adapters send none) goes as one, with its length
            content = await request.aread()
            headers = [(k, v) for k, v in headers if k.lower() != "transfer-encoding"]
        try:
            async with session.request(
                request.method,
                yarl.URL(str(request.url), encoded=True),  # httpx's bytes, not re-quoted
                data=(
                    (content if len(content) < ONE_PIECE_BODY else io.BytesIO(content))
                    if content
                    else None  # no body: no Content-Length a GET would not carry
                ),
                headers=headers,
                timeout=_timeout(request),
                allow_redirects=False,
                compress=None,
                chunked=None,
            ) as answer:
                body = await answer.read()
        except aiohttp.ClientError as exc:
            raise _as_httpx(exc, request) from exc
        return httpx.Response(
            answer.status,
            headers=answer.raw_headers,
            stream=httpx.ByteStream(body),
            extensions={
                "http_version": b"HTTP/%d.%d" % tuple(answer.version or (1, 1)),
                "reason_phrase": (answer.reason or "").encode("latin-1", "replace"),
            },
        )

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()
            await asyncio.sleep(0)  # let the transports' connection_lost run
