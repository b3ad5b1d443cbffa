from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import respx

from providers.base import (
    AmbiguousStatus,
    BadOutput,
    ConnectFailed,
    ConnectionLost,
    DefiniteFailure,
    NoCapacity,
    OutcomeUnknown,
    Overloaded,
    ProviderError,
    ProviderRequest,
    RateLimited,
    Rejected,
    TimedOut,
    Unavailable,
)
from providers.capacity import retry_after_seconds
from providers.config import ProviderConfig
from providers.factory import build_provider

#: One TLS context for the module: building one per client costs ~80 ms.
TLS = ssl.create_default_context()

pytestmark = pytest.mark.parametrize(
    "protocol", ("openai", "anthropic", "gemini", "openai-compatible")
)


async def _fail(
    wire: Any, config: ProviderConfig, request: ProviderRequest, **mock: Any
) -> ProviderError:
    with respx.mock(assert_all_called=False) as router:
        router.post(wire.endpoints[config.protocol]).mock(**mock)
        async with httpx.AsyncClient(verify=TLS) as client:
            with pytest.raises(ProviderError) as caught:
                await build_provider(config, client).call(request)
    return caught.value


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (httpx.ConnectError("[Errno 111] Connection refused"), "connect_failed"),
        (httpx.ConnectError("[Errno -2] Name or service not known"), "connect_failed"),
        (httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED]"), "connect_failed"),
        (httpx.ConnectTimeout("timed out"), "connect_failed"),
        (httpx.PoolTimeout("no connection"), "pool_timeout"),
    ],
)
async def test_connect_failures_are_definite(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
    exc: Exception,
    reason: str,
) -> None:
    error = await _fail(wire, make_config(protocol), make_request(), side_effect=exc)
    assert isinstance(error, ConnectFailed)
    assert error.outcome == "definite"
    assert error.reason == reason
    assert error.__cause__ is exc


@pytest.mark.parametrize("exc", [httpx.ReadTimeout("read"), httpx.WriteTimeout("write")])
async def test_read_or_write_timeout_after_send_is_unknown(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
    exc: Exception,
) -> None:
    error = await _fail(wire, make_config(protocol), make_request(), side_effect=exc)
    assert isinstance(error, TimedOut)
    assert error.outcome == "unknown"
    assert error.__cause__ is exc


async def test_whole_call_deadline_passing_is_unknown(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
) -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return httpx.Response(200, json=wire.body(protocol, json.dumps(wire.answer)))

    loop = asyncio.get_running_loop()
    started = loop.time()
    error = await _fail(wire, make_config(protocol), make_request(timeout=0.2), side_effect=slow)
    assert isinstance(error, TimedOut)
    assert loop.time() - started < 2.0


@pytest.mark.parametrize(
    "exc",
    [
        httpx.RemoteProtocolError("peer closed connection without sending complete message"),
        httpx.ReadError("[Errno 104] Connection reset by peer"),
        httpx.WriteError("[Errno 32] Broken pipe"),
    ],
)
async def test_connection_dropped_mid_response_is_unknown(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
    exc: Exception,
) -> None:
    error = await _fail(wire, make_config(protocol), make_request(), side_effect=exc)
    assert isinstance(error, ConnectionLost)
    assert error.outcome == "unknown"


async def test_body_shorter_than_its_content_length_is_unknown(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
) -> None:
    full = json.dumps(wire.body(protocol, json.dumps(wire.answer))).encode()
    response = httpx.Response(
        200,
        headers={"content-type": "application/json", "content-length": str(len(full))},
        content=full[: len(full) // 2],
    )
    error = await _fail(wire, make_config(protocol), make_request(), return_value=response)
    assert isinstance(error, ConnectionLost)
    assert error.reason == "truncated_body"


async def test_complete_body_that_is_not_json_is_bad_envelope(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
) -> None:
    response = httpx.Response(200, content=b"<html>upstream says hi</html>")
    error = await _fail(wire, make_config(protocol), make_request(), return_value=response)
    assert isinstance(error, BadOutput)
    assert error.reason == "bad_envelope"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_client_error_statuses_are_rejected(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
    status: int,
) -> None:
    response = httpx.Response(status, json={"error": {"message": "bad request here"}})
    error = await _fail(wire, make_config(protocol), make_request(), return_value=response)
    assert isinstance(error, Rejected)
    assert error.reason == f"status_{status}"
    assert error.status_code == status
    assert "bad request here" in str(error)


async def test_429_is_rate_limited_with_retry_after(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
) -> None:
    response = httpx.Response(429, headers={"retry-after": "7"}, json={"error": {}})
    error = await _fail(wire, make_config(protocol), make_request(), return_value=response)
    assert isinstance(error, RateLimited)
    assert error.outcome == "definite"
    assert error.retry_after == 7.0


@pytest.mark.parametrize("status", [500, 501])
async def test_other_server_errors_are_unavailable_and_definite(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
    status: int,
) -> None:
    response = httpx.Response(status, text="<html>down</html>")
    error = await _fail(wire, make_config(protocol), make_request(), return_value=response)
    assert type(error) is Unavailable
    assert isinstance(error, DefiniteFailure) and not isinstance(error, NoCapacity)
    assert error.reason == f"status_{status}"


@pytest.mark.parametrize("status", [503, 529])
async def test_overload_statuses_are_overloaded_whatever_the_body(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
    status: int,
) -> None:
    response = httpx.Response(status, text="<html>down</html>")
    error = await _fail(wire, make_config(protocol), make_request(), return_value=response)
    assert type(error) is Overloaded
    assert isinstance(error, NoCapacity) and isinstance(error, DefiniteFailure)
    assert error.reason == f"status_{status}"
    assert error.retry_after is None and error.limits is None
    assert error.as_dict()["capacity"] == "overloaded"
    assert error.as_dict()["retry_after_s"] is None


@pytest.mark.parametrize("status", [502, 504])
async def test_gateway_statuses_are_unknown_by_default(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
    status: int,
) -> None:
    response = httpx.Response(status, text="Bad Gateway")
    error = await _fail(wire, make_config(protocol), make_request(), return_value=response)
    assert isinstance(error, AmbiguousStatus)
    assert isinstance(error, OutcomeUnknown)
    assert error.status_code == status


async def test_unknown_statuses_are_configurable_per_provider(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
) -> None:
    config = make_config(protocol, unknown_statuses=frozenset({503}))
    error = await _fail(wire, config, make_request(), return_value=httpx.Response(503))
    assert isinstance(error, AmbiguousStatus)
    error = await _fail(wire, config, make_request(), return_value=httpx.Response(502))
    assert type(error) is Unavailable


async def test_key_echoed_by_the_provider_never_reaches_errors_or_logs(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    echo = {"error": {"message": f"Incorrect API key provided: {wire.secret}."}}
    error = await _fail(
        wire, make_config(protocol), make_request(), return_value=httpx.Response(401, json=echo)
    )
    assert isinstance(error, Rejected)
    for text in (str(error), repr(error.as_dict()), error.body_excerpt or "", caplog.text):
        assert wire.secret not in text
    assert "Incorrect API key provided: ***" in str(error)


def test_retry_after_reads_seconds_milliseconds_and_http_dates(protocol: str) -> None:
    assert retry_after_seconds(httpx.Headers({"retry-after": "2"})) == 2.0
    assert retry_after_seconds(httpx.Headers({"retry-after-ms": "1500"})) == 1.5
    date = httpx.Headers({"retry-after": "Wed, 21 Oct 2015 07:28:30 GMT"})
    assert retry_after_seconds(date, now=1445412480.0) == 30.0
    assert retry_after_seconds(httpx.Headers({"retry-after": "soon"})) is None
    assert retry_after_seconds(httpx.Headers()) is None


@pytest.mark.parametrize(
    ("exc", "error", "reason"),
    [
        (httpx.DecodingError("bad gzip"), BadOutput, "bad_envelope"),
        (httpx.UnsupportedProtocol("ftp"), Rejected, "bad_request_url"),
        (httpx.ProxyError("proxy said no"), ConnectFailed, "proxy_failed"),
        (httpx.NetworkError("odd"), ConnectionLost, "connection_lost"),
    ],
)
async def test_every_other_httpx_error_is_translated_too(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
    exc: Exception,
    error: type[ProviderError],
    reason: str,
) -> None:
    caught = await _fail(wire, make_config(protocol), make_request(), side_effect=exc)
    assert type(caught) is error
    assert caught.reason == reason
    assert caught.__cause__ is exc
