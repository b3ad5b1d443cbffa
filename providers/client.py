"""The HTTP client the provider adapters share: ``ProviderClient`` over ``Http1Transport``.

``ProviderClient`` is an ``httpx.AsyncClient`` that keeps no cookies (``NoCookies``) and
sends a provider call in one hop (``post_read``). Its transport is an HTTP/1.1 pool on
asyncio behind httpx's transport interface (``providers/http1_pool.py``; one connection,
parsed by httptools, in ``providers/http1_connection.py``), which raises for every
failure the httpx exception httpcore raises for it, so the adapters' "not sent / maybe
sent" classification reads the same classes as on httpx's own transport.
"""

from __future__ import annotations

import http.cookiejar
from typing import Any

import httpx

from providers.http1_pool import Http1Transport

PARSED_URLS_KEPT = 64  # distinct URLs a client keeps parsed (one per provider endpoint)


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
    """``httpx.AsyncClient`` over ``Http1Transport``, keeping no cookies, with ``post_read``."""

    _no_cookies = NoCookies()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._urls: dict[str, httpx.URL] = {}

    @property
    def cookies(self) -> httpx.Cookies:
        return self._no_cookies

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        """Ignore: this client keeps no cookies."""

    def _init_transport(  # type: ignore[override]
        self, transport: httpx.AsyncBaseTransport | None = None, **options: Any
    ) -> httpx.AsyncBaseTransport:
        """The default transport: ``Http1Transport`` (HTTP/1.1, no client certificate).

        httpx builds its default transport here (with keywords: ``verify``, ``cert``,
        ``trust_env``, ``http1``, ``http2``, ``limits``) and, only when none is given, its
        proxy transports from the environment; so overriding this keeps those. A given
        ``transport`` (a test's) is used as it is; a client certificate or HTTP/2, which
        this transport does not do, gets httpx's own.
        """
        if transport is not None:
            return transport
        if (
            options.get("cert") is not None
            or options.get("http2")
            or not options.get("http1", True)
        ):
            return super()._init_transport(**options)
        return Http1Transport(
            options.get("limits"),
            verify=options.get("verify", True),
            trust_env=options.get("trust_env", True),
        )

    def _parsed(self, url: str) -> httpx.URL:
        """Return ``url`` parsed, once per URL: a provider client posts to a handful.

        ``build_request`` parses a string URL on every call (2 % of a sync job's CPU);
        an ``httpx.URL`` it takes as it is. An absolute URL does not depend on the
        client's ``base_url``; a relative one is left for ``build_request`` to join.
        """
        parsed = self._urls.get(url)
        if parsed is None:
            parsed = httpx.URL(url)
            if parsed.is_relative_url:
                return parsed
            if len(self._urls) >= PARSED_URLS_KEPT:
                self._urls.clear()
            self._urls[url] = parsed
        return parsed

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
        request = self.build_request(
            "POST", self._parsed(url), content=content, headers=headers, timeout=timeout
        )
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


class PlainProviderClient(httpx.AsyncClient):
    """``httpx.AsyncClient`` as httpx ships it, keeping no cookies (shortcut
    ``provider_pool`` off): its own transport, every call through ``send``."""

    _no_cookies = NoCookies()

    @property
    def cookies(self) -> httpx.Cookies:
        return self._no_cookies

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        """Ignore: this client keeps no cookies."""


def provider_client(
    limits: httpx.Limits,
    transport: httpx.AsyncBaseTransport | None = None,
    *,
    own_pool: bool = True,
) -> httpx.AsyncClient:
    """Return the ``httpx.AsyncClient`` the provider adapters share.

    ``own_pool`` (the ``provider_pool`` shortcut): ``ProviderClient``, whose transport is
    ``Http1Transport`` within ``limits``; else ``PlainProviderClient``, httpx's own
    transport within ``limits``. A ``transport`` given (a test's ``MockTransport``) is
    used as it is. Proxies from the environment keep httpx's own transports (``limits``
    applies to them too). Either keeps no cookies (``NoCookies``).
    """
    if own_pool:
        return ProviderClient(transport=transport, limits=limits)
    return PlainProviderClient(transport=transport, limits=limits)
