"""The scenario's HTTP client: every exchange it makes is recorded through httpx event hooks.

A request carries its recording wishes in ``request.extensions``: ``onejob.actor`` names who
sent it (``scenario`` when unnamed) and ``onejob.record = False`` keeps it out of the report
(polling, say). A request that gets no response fires no response hook; the sender hands its
``httpx.RequestError`` to :meth:`ExchangeRecorder.failed`, which reads the request from it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import httpx

from scenarios.model import Exchange

BODY_LIMIT = 2000  # characters of a request or response body kept in the report
REQUEST_TIMEOUT = 30.0  # seconds, one HTTP request of a scenario
KEPT_HEADERS = (
    "idempotency-key",
    "prefer",
    "location",
    "idempotent-replayed",
    "preference-applied",
    "content-type",
    "retry-after",
    "x-onejob-instance",
)
ACTOR = "onejob.actor"  #: request extension: who sent the request
RECORD = "onejob.record"  #: request extension: False keeps the exchange out of the report
_STARTED = "onejob.started"  # request extension the request hook sets: (at, monotonic start)


def exchange_options(actor: str, record: bool) -> dict[str, Any]:
    """Return the request ``extensions`` that name the sender and whether to record."""
    return {ACTOR: actor, RECORD: record}


class ExchangeRecorder:
    """Collect the exchanges of every client it hooks into, stamped by ``clock``."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.exchanges: list[Exchange] = []

    def client(
        self, timeout: float = REQUEST_TIMEOUT, transport: httpx.AsyncBaseTransport | None = None
    ) -> httpx.AsyncClient:
        """Return a new client whose exchanges this recorder keeps."""
        return httpx.AsyncClient(
            timeout=timeout,
            transport=transport,
            limits=httpx.Limits(max_connections=200, max_keepalive_connections=200),
            event_hooks={"request": [self.on_request], "response": [self.on_response]},
        )

    async def on_request(self, request: httpx.Request) -> None:
        """Stamp the request with when it was sent."""
        request.extensions[_STARTED] = (self.clock(), time.monotonic())

    async def on_response(self, response: httpx.Response) -> None:
        """Record the exchange the response completes (reading its body)."""
        request = response.request
        if not _recorded(request):
            return
        await response.aread()
        self.exchanges.append(
            dataclasses.replace(
                _sent(request),
                status=response.status_code,
                response_headers=_kept(response.headers),
                response_body=response.text[:BODY_LIMIT],
            )
        )

    def failed(self, error: httpx.RequestError) -> None:
        """Record a request that got no response."""
        if _recorded(error.request):
            error_text = f"{type(error).__name__}: {error}"
            self.exchanges.append(dataclasses.replace(_sent(error.request), error=error_text))


def _recorded(request: httpx.Request) -> bool:
    return request.extensions.get(RECORD, True) is not False and _STARTED in request.extensions


def _sent(request: httpx.Request) -> Exchange:
    at, started = request.extensions[_STARTED]
    return Exchange(
        at=at,
        elapsed=time.monotonic() - started,
        actor=str(request.extensions.get(ACTOR, "scenario")),
        method=request.method,
        url=str(request.url),
        status=None,
        request_headers=_kept(request.headers),
        request_body=request.content.decode("utf-8", "replace")[:BODY_LIMIT],
    )


def _kept(headers: httpx.Headers) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items() if k.lower() in KEPT_HEADERS}
