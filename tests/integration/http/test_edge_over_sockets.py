"""The HTTP edge over a real socket: framing, header deadline and limits, raw paths, logs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Callable
from typing import Any

import pytest
from litestar import Litestar

from gateway.http.edge import EdgeProtocol, PlainEdgeProtocol


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


async def _read_all(reader: asyncio.StreamReader) -> bytes:
    """Read until the server closes; a reset after its answer ends the read too."""
    chunks = []
    with contextlib.suppress(ConnectionError):
        while chunk := await reader.read(65536):
            chunks.append(chunk)
    return b"".join(chunks)


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


async def test_a_wrong_method_is_405_with_the_methods_the_path_allows(
    app: Litestar, served: Any
) -> None:
    async with served(app) as base:
        response = await _exchange(
            base, b"TRACE /healthz HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"
        )
    assert _status(response) == 405, response[:300]
    allow = response.lower().split(b"\r\nallow: ")[1].split(b"\r\n")[0]
    assert set(allow.decode().upper().replace(" ", "").split(",")) >= {"GET", "HEAD"}


def _job_request(key: str, framing: str, idempotency_key: str = "edge-1") -> bytes:
    body = b'{"contract":"echo@1","input":{"n":1}}'
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    head = (
        f"POST /v1/jobs HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n"
        f'Idempotency-Key: "{idempotency_key}"\r\nContent-Type: application/json\r\n'
        f"{framing}\r\n"
    ).encode()
    return head + chunked


@pytest.mark.parametrize(
    "framing",
    [
        "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
        "Content-Length: 44\r\nTransfer-Encoding: chunked\r\n",
    ],
)
async def test_content_length_with_chunked_is_refused_and_the_connection_closed(
    app: Litestar, keys: Any, served: Any, count_rows: Any, framing: str
) -> None:
    pipelined = b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n"
    async with served(app) as base:
        response = await _exchange(base, _job_request(keys.alice, framing) + pipelined)
    assert _status(response) == 400, response[:300]
    assert b"connection: close" in response.lower()
    # RFC 9112 §6.3: the smuggled second request is never answered.
    assert response.count(b"HTTP/1.1 ") == 1, response
    assert await count_rows() == (0, 0)


async def test_chunked_alone_is_accepted_so_the_refusal_is_about_the_conflict(
    app: Litestar, keys: Any, served: Any, count_rows: Any
) -> None:
    raw = _job_request(keys.alice, "Transfer-Encoding: chunked\r\nConnection: close\r\n")
    async with served(app) as base:
        response = await _exchange(base, raw)
    assert _status(response) == 201, response[:300]
    jobs, _ = await count_rows()
    assert jobs == 1


class _QuickEdge(EdgeProtocol):
    header_timeout = 0.5


@pytest.mark.parametrize("dribble", [False, True])
async def test_a_header_block_that_does_not_finish_in_time_gets_408_and_a_closed_connection(
    app: Litestar, served: Any, dribble: bool
) -> None:
    async with served(app, _QuickEdge) as base:
        host, port = base.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        started = asyncio.get_running_loop().time()
        answer = asyncio.create_task(_read_all(reader))
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n")
        if dribble:  # slowloris: one header byte at a time never resets the clock
            for byte in b"X-Slow: abcdefghijklmnopqrstuvwxyz":
                await asyncio.sleep(0.1)
                if answer.done():
                    break
                writer.write(bytes([byte]))
        response = await asyncio.wait_for(answer, 5)
        elapsed = asyncio.get_running_loop().time() - started
        writer.close()
    assert _status(response) == 408, response
    assert b"urn:onejob:request-timeout" in response
    assert 0.4 < elapsed < 2.0


async def test_a_keep_alive_connection_gets_a_fresh_header_deadline_per_request(
    app: Litestar, served: Any
) -> None:
    async with served(app, _QuickEdge) as base:
        host, port = base.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        for _ in range(3):  # 3 x 0.3 s on one connection outlives one 0.5 s deadline
            await asyncio.sleep(0.3)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            assert _status(head) == 200, head
        writer.close()


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        (EdgeProtocol.max_headers - 2, 200),  # with Host and Connection: exactly the limit
        (EdgeProtocol.max_headers - 1, 431),
        (0, 200),
    ],
)
async def test_header_count_is_limited(
    app: Litestar, served: Any, headers: int, status: int
) -> None:
    extra = "".join(f"X-H{i}: v\r\n" for i in range(headers))
    raw = f"GET /healthz HTTP/1.1\r\nHost: gw\r\n{extra}Connection: close\r\n\r\n".encode()
    async with served(app) as base:
        response = await _exchange(base, raw)
    assert _status(response) == status, response[:300]


@pytest.mark.parametrize(
    ("size", "status"),
    [(EdgeProtocol.max_header_bytes - 200, 200), (EdgeProtocol.max_header_bytes + 1, 431)],
)
async def test_header_bytes_are_limited(app: Litestar, served: Any, size: int, status: int) -> None:
    raw = f"GET /healthz HTTP/1.1\r\nHost: gw\r\nX-Big: {'a' * size}\r\nConnection: close\r\n\r\n"
    async with served(app) as base:
        response = await _exchange(base, raw.encode())
    assert _status(response) == status, response[:300]
    if status == 431:
        assert b"urn:onejob:headers-too-large" in response
        assert b"connection: close" in response.lower()


async def test_an_endless_header_value_is_cut_off_before_it_ends(
    app: Litestar, served: Any
) -> None:
    async with served(app) as base:
        host, port = base.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        answer = asyncio.create_task(_read_all(reader))
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: gw\r\nX-Endless: ")
        with contextlib.suppress(ConnectionError):
            for _ in range(64):  # 4 MiB with no end of line; the server must not wait for one
                if answer.done():
                    break
                writer.write(b"a" * 16384)
                await writer.drain()
                await asyncio.sleep(0.005)
        response = await asyncio.wait_for(answer, 5)
        writer.close()
    assert _status(response) == 431, response[:300]


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_the_body_limit_holds_over_a_socket(
    app: Litestar, settings: Any, keys: Any, served: Any, count_rows: Any, framing: str
) -> None:
    body = b'{"contract":"echo@1","input":{"s":"' + b"a" * settings.max_body_bytes + b'"}}'
    if framing == "chunked":
        framed = b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    else:
        framed = b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    head = (
        f"POST /v1/jobs HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {keys.alice}\r\n"
        'Idempotency-Key: "big"\r\nContent-Type: application/json\r\nConnection: close\r\n'
    ).encode()
    async with served(app) as base:
        response = await _exchange(base, head + framed)
    assert _status(response) == 413, response[:300]
    assert await count_rows() == (0, 0)


def _problem(response: bytes) -> dict[str, Any]:
    """The problem document of a one-response answer; fail unless it is one."""
    head, _, body = response.partition(b"\r\n\r\n")
    assert b"\r\ncontent-type: application/problem+json\r\n" in head.lower() + b"\r\n", head
    document: dict[str, Any] = json.loads(body)
    assert set(document) == {"type", "title", "status", "detail"}, document
    assert document["status"] == _status(response)
    return document


@pytest.mark.parametrize(
    "request_line",
    ["FOO /v1/jobs HTTP/1.1", "get /v1/jobs HTTP/1.1", "GETX /healthz HTTP/1.1", "BREW / HTTP/1.1"],
)
async def test_a_method_the_parser_does_not_know_is_501_as_a_problem(
    app: Litestar, served: Any, request_line: str
) -> None:
    async with served(app) as base:
        response = await _exchange(base, f"{request_line}\r\nHost: gw\r\n\r\n".encode())
    assert _status(response) == 501, response[:300]
    assert _problem(response)["type"] == "urn:onejob:method-not-implemented"
    assert b"connection: close" in response.lower()


async def test_a_known_method_a_path_does_not_take_is_still_405_from_the_app(
    app: Litestar, served: Any
) -> None:
    async with served(app) as base:
        response = await _exchange(
            base, b"PROPFIND /v1/jobs HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"
        )
    assert _status(response) == 405, response[:300]
    assert _problem(response)["type"] == "urn:onejob:method-not-allowed"


@pytest.mark.parametrize("character", [b"\x00", b"\x01", b"\x1b", b"\x7f", b"\r"])
@pytest.mark.parametrize("quoted", [False, True])
async def test_a_control_character_in_the_idempotency_key_is_the_invalid_key_problem(
    app: Litestar, keys: Any, served: Any, count_rows: Any, character: bytes, quoted: bool
) -> None:
    key = b"order" + character + b"42"
    value = b'"' + key + b'"' if quoted else key
    body = b'{"contract":"echo@1","input":{"n":1}}'
    raw = (
        b"POST /v1/jobs HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\n"
        b"Idempotency-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
    ) % (keys.alice.encode(), value, len(body), body)
    async with served(app) as base:
        response = await _exchange(base, raw)
    assert _status(response) == 400, response[:300]
    assert _problem(response)["type"] == "urn:onejob:invalid-idempotency-key"
    assert await count_rows() == (0, 0)


async def test_a_tab_in_the_idempotency_key_reaches_the_app_and_gets_the_same_problem(
    app: Litestar, keys: Any, served: Any
) -> None:
    raw = _job_request(keys.alice, "Content-Length: 37\r\nConnection: close\r\n", "a\tb")
    raw = raw.replace(b"Transfer-Encoding", b"X-Unused")  # _job_request frames it chunked
    body = b'{"contract":"echo@1","input":{"n":1}}'
    raw = raw.split(b"\r\n\r\n")[0] + b"\r\n\r\n" + body
    async with served(app) as base:
        response = await _exchange(base, raw)
    assert _status(response) == 400, response[:300]
    assert _problem(response)["type"] == "urn:onejob:invalid-idempotency-key"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"GET /healthz HTTP/1.1\r\nHost: gw\r\nX-Other: a\x01b\r\n\r\n", b"X-Other"),
        (b"GET /v1/jobs/\xc3\xa9 HTTP/1.1\r\nHost: gw\r\n\r\n", b"url"),
        (b"GET /healthz HTTP/1.1\r\nHost: gw\r\nIdem\x01potency-Key: a\r\n\r\n", b"header"),
        (b"GET /healthz HTTP/1.1\r\nHost: gw\r\nIdempotency-Key : a\r\n\r\n", b"header"),
        (b"GET /healthz HTTP/1.1\r\nHost: gw\r\nX-Folded: a\r\n b\r\n\r\n", b"whitespace"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", b"method"),
        (b"GET /healthz HTTP/1.2\r\nHost: gw\r\n\r\n", b"version"),
    ],
)
async def test_what_the_parser_refuses_is_a_bad_request_problem_with_its_reason(
    app: Litestar, served: Any, raw: bytes, reason: bytes
) -> None:
    async with served(app) as base:
        response = await _exchange(base, raw)
    assert _status(response) == 400, response[:300]
    problem = _problem(response)
    assert problem["type"] == "urn:onejob:bad-request"
    assert reason.decode() in problem["detail"]
    assert b"connection: close" in response.lower()


@pytest.mark.parametrize("protocol", [EdgeProtocol, PlainEdgeProtocol])
@pytest.mark.parametrize(
    ("refused", "status", "kind"),
    [
        (b"FOO /v1/jobs HTTP/1.1\r\nHost: gw\r\n\r\n", 501, "method-not-implemented"),
        (
            b"GET /healthz HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: a\x7fb\r\n\r\n",
            400,
            "invalid-idempotency-key",
        ),
    ],
)
async def test_requests_before_a_refused_one_are_answered_first(
    app: Litestar,
    keys: Any,
    served: Any,
    count_rows: Any,
    protocol: type[EdgeProtocol],
    refused: bytes,
    status: int,
    kind: str,
) -> None:
    body = b'{"contract":"echo@1","input":{"n":1}}'
    create = (
        b"POST /v1/jobs HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\n"
        b'Idempotency-Key: "pipelined"\r\nContent-Type: application/json\r\n'
        b"Content-Length: %d\r\n\r\n%s"
    ) % (keys.alice.encode(), len(body), body)
    health = b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n"
    async with served(app, protocol) as base:
        response = await _exchange(base, create + health + refused)
    statuses = [int(status) for status in re.findall(rb"HTTP/1\.1 (\d{3}) ", response)]
    assert statuses == [201, 200, status], response
    assert await count_rows() == (1, 1)
    last = _problem(b"HTTP/1.1 " + response.rsplit(b"HTTP/1.1 ", 1)[1])
    assert last["type"] == f"urn:onejob:{kind}"
