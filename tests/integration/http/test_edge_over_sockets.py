"""The HTTP edge over a real socket: raw paths, access lines for every answer."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import pytest
from litestar import Litestar


async def _exchange(base_url: str, raw: bytes, *, read_timeout: float = 5.0) -> bytes:
    """Send ``raw`` bytes on a fresh connection; return all the server sent back."""
    host, port = base_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(raw)
        await writer.drain()
        chunks = []
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            async with asyncio.timeout(read_timeout):
                while chunk := await reader.read(65536):
                    chunks.append(chunk)
        return b"".join(chunks)
    finally:
        writer.close()


def _status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


@pytest.mark.parametrize(
    "path",
    ["/v1%2Fadmin%2Fattempts", "/v1/admin%2fattempts", "/v1/jobs/a%2F..%2Fb", "/v1%5Cadmin"],
)
async def test_an_encoded_slash_never_reaches_a_route(
    app: Litestar,
    keys: Any,
    served: Callable[[Litestar], contextlib.AbstractAsyncContextManager[str]],
    path: str,
) -> None:
    async with served(app) as base:
        raw = (
            f"GET {path} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {keys.admin}\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
        response = await _exchange(base, raw)
    assert _status(response) == 400, response[:300]
    assert b"application/problem+json" in response
    assert b'"attempts"' not in response


async def test_not_found_and_method_not_allowed_get_an_access_line(
    app: Litestar,
    served: Callable[[Litestar], contextlib.AbstractAsyncContextManager[str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with served(app) as base:
        with caplog.at_level(logging.INFO, logger="onejob.access"):
            for request_line in ("GET /nowhere HTTP/1.1", "DELETE /healthz HTTP/1.1"):
                raw = f"{request_line}\r\nHost: gw\r\nConnection: close\r\n\r\n".encode()
                await _exchange(base, raw)
    lines = [(r.method, r.path, r.status) for r in caplog.records if r.name == "onejob.access"]  # type: ignore[attr-defined]
    assert ("GET", "/nowhere", 404) in lines
    assert ("DELETE", "/healthz", 405) in lines
