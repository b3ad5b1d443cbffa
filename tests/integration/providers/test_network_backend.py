"""The provider client's transport fails exactly where httpx's own does, with the same
exceptions (``providers/http1_pool.py``, ``providers/http1_connection.py``).

Every break point runs over real loopback sockets against httpx's own transport
(``httpx``: httpcore on anyio, the reference) and against ``Http1Transport`` through
``AsyncClient.post`` (``http1``) and through ``ProviderClient.post_read`` (``one-hop``,
the adapters' path), and the test asserts the same outcome: the adapters tell "not sent"
from "maybe sent" by these exception classes, so a difference would change what an
attempt becomes.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json as jsonlib
import socket
import ssl
import struct
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import httpx
import pytest
import trustme
import uvloop

from providers.client import ProviderClient, provider_client
from providers.http1_pool import Http1Transport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
BACKENDS = ["httpx", "http1", "one-hop"]


class Server:
    """A raw HTTP/1.1 server on loopback whose behaviour each test chooses."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                await self.handler(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        self.server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=self.ssl)
        return self

    ssl: ssl.SSLContext | None = None

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """Read one request (head and Content-Length body); b'' when the client went away."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return await reader.readexactly(length)


def answer(body: bytes, *, close: bool = False) -> bytes:
    extra = b"connection: close\r\n" if close else b""
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


class OneHop(ProviderClient):
    """A provider client whose ``post`` is the adapters' ``post_read``."""

    async def post(  # type: ignore[override]
        self,
        url: str,
        *,
        json: Any = None,
        content: bytes = b"",
        headers: dict[str, str] | None = None,
        **_: Any,
    ) -> httpx.Response:
        headers = dict(headers or {})
        if json is not None:
            content = jsonlib.dumps(json).encode()
            headers["content-type"] = "application/json"
        return await self.post_read(url, content=content, headers=headers, timeout=self.timeout)


def client(backend: str, **kwargs: Any) -> httpx.AsyncClient:
    if backend == "httpx":
        return httpx.AsyncClient(**kwargs)
    c = (OneHop if backend == "one-hop" else ProviderClient)(**kwargs)
    assert isinstance(c._transport, Http1Transport)
    return c


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


Run = Callable[[Coroutine[Any, Any, None]], None]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Run:
    """Run a test body on asyncio's loop and on uvloop's (``onejob serve`` runs uvloop)."""
    return uvloop.run if request.param == "uvloop" else asyncio.run


async def outcome(call: Awaitable[httpx.Response]) -> str:
    """``"200 <body>"`` or the exception's class name."""
    try:
        response = await call
    except httpx.HTTPError as exc:
        return type(exc).__name__
    return f"{response.status_code} {response.text}"


async def post_once(handler: Handler, backend: str, **options: Any) -> str:
    """The outcome of one POST to a server that answers with ``handler``."""
    async with Server(handler) as server, client(backend, **options) as c:
        return await outcome(c.post(f"http://127.0.0.1:{server.port}/", json={}))


def test_keep_alive_is_reused_and_an_idle_hang_up_opens_a_new_connection(
    backend: str, run: Run
) -> None:
    async def body() -> None:
        async def keep_then_hang_up(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter
        ) -> None:
            for _ in range(2):  # two requests on this connection, then it goes away while idle
                await read_request(reader)
                writer.write(answer(b"ok"))
                await writer.drain()

        async with Server(keep_then_hang_up) as server, client(backend) as c:
            url = f"http://127.0.0.1:{server.port}/"
            assert [await outcome(c.post(url, json={})) for _ in range(2)] == ["200 ok"] * 2
            assert server.connections == 1
            await asyncio.sleep(0.1)  # the server closed the idle connection
            # Sending on it would be "maybe sent" (RemoteProtocolError): the pool must see
            # the hang-up and open a new connection instead.
            assert await outcome(c.post(url, json={})) == "200 ok"
            assert server.connections == 2

    run(body())


def test_a_refused_connection_is_a_connect_error(backend: str, run: Run) -> None:
    async def body() -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]  # bound, never listening: refused
            async with client(backend) as c:
                assert await outcome(c.post(f"http://127.0.0.1:{port}/", json={})) == "ConnectError"

    run(body())


def test_no_answer_in_time_is_a_read_timeout(backend: str, run: Run) -> None:
    async def body() -> None:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            await asyncio.sleep(2)

        assert await post_once(silent, backend, timeout=0.3) == "ReadTimeout"

    run(body())


def test_a_hang_up_after_the_request_is_a_remote_protocol_error(backend: str, run: Run) -> None:
    async def body() -> None:
        async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)  # the request arrived: it may have run

        assert await post_once(hang_up, backend) == "RemoteProtocolError"

    run(body())


@pytest.mark.parametrize(
    ("ending", "expected"), [("reset", "ReadError"), ("close", "RemoteProtocolError")]
)
def test_a_connection_ended_mid_body_fails_the_call(
    backend: str, run: Run, ending: str, expected: str
) -> None:
    async def body() -> None:
        async def partial(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
            await writer.drain()
            if ending == "reset":
                await asyncio.sleep(0.05)
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()  # RST, not FIN
            # "close": the server's handler returns and closes (FIN)

        # The adapters read both as "maybe sent" (ConnectionLost).
        assert await post_once(partial, backend) == expected

    run(body())


@pytest.mark.parametrize(
    "headers",
    [
        {"x-org": "a\r\nx-injected: 1"},
        {"x-org": "a\nb"},
        {"bad name": "v"},
        {"content-length": "abc"},
    ],
)
def test_a_header_h11_refuses_is_refused_before_anything_is_sent(
    backend: str, run: Run, headers: dict[str, str]
) -> None:
    async def body() -> None:
        received: list[bytes] = []

        async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            received.append(await reader.read(65536))

        async with Server(record) as server, client(backend) as c:
            url = f"http://127.0.0.1:{server.port}/"
            assert await outcome(c.post(url, content=b"{}", headers=headers)) == (
                "LocalProtocolError"
            )
            await asyncio.sleep(0.05)
        assert not any(received)  # not one byte of the request

    run(body())


def test_a_gzip_chunked_answer_arrives_decoded(backend: str, run: Run) -> None:
    """Providers answer compressed (httpx asks for it) and often chunked: the transport
    de-chunks, httpx decodes by the headers, as on its own transport."""

    async def body() -> None:
        text = jsonlib.dumps({"choices": [{"message": {"content": "ok " * 500}}]}).encode()
        packed = gzip.compress(text)

        async def gzipped(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            assert b"gzip" in head.lower().split(b"accept-encoding:")[1].split(b"\r\n")[0]
            await reader.readexactly(2)
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n"
            )
            for start in range(0, len(packed), 100):
                piece = packed[start : start + 100]
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            writer.write(b"0\r\n\r\n")
            await writer.drain()

        async with Server(gzipped) as server, client(backend) as c:
            response = await c.post(f"http://127.0.0.1:{server.port}/", json={})
            assert response.status_code == 200
            assert response.content == text
            assert response.json()["choices"][0]["message"]["content"].startswith("ok ok")

    run(body())


def test_the_url_goes_out_as_httpx_built_it_and_a_get_carries_no_length(
    backend: str, run: Run
) -> None:
    """Percent-escapes stay (the Gemini adapter quotes a model name with ``safe=""``; a
    signed URL must not change), and a GET has no ``Content-Length``."""

    async def body() -> None:
        heads: list[bytes] = []

        async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            heads.append(await reader.readuntil(b"\r\n\r\n"))
            writer.write(answer(b"ok"))
            await writer.drain()

        path = "/v1beta/models/tuned%2Fgemini%3Apro%40v1:generateContent?sig=a%7Eb%2Fc&k=%3D"
        async with Server(record) as server, client(backend) as c:
            assert (await c.get(f"http://127.0.0.1:{server.port}{path}")).text == "ok"
        request_line, *fields = heads[0].decode().split("\r\n")
        assert request_line == f"GET {path} HTTP/1.1"
        assert not [f for f in fields if f.lower().startswith("content-length")]

    run(body())


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_a_request_the_server_hung_up_on_is_not_sent_again(
    backend: str, run: Run, method: str
) -> None:
    """Some clients (aiohttp) resend an idempotent request on a fresh connection once;
    httpx never does, and the adapters must see the first one as "maybe sent"."""

    async def body() -> None:
        async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)  # it arrived: it may have run

        async with Server(hang_up) as server, client(backend) as c:
            got = await outcome(c.request(method, f"http://127.0.0.1:{server.port}/x"))
            assert got == "RemoteProtocolError"
            assert server.connections == 1

    run(body())


def test_large_bodies_both_ways_arrive_whole(backend: str, run: Run) -> None:
    async def body() -> None:
        big = bytes(range(256)) * 16_384  # 4 MiB: both sides' flow control engages

        async def echo_slowly(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await asyncio.sleep(0.2)  # the client's writes back up meanwhile
            body = await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
            for start in range(0, len(body), 65_536):
                writer.write(body[start : start + 65_536])
                await writer.drain()

        async with Server(echo_slowly) as server, client(backend) as c:
            response = await c.post(f"http://127.0.0.1:{server.port}/", content=big)
            assert response.content == big

    run(body())


@pytest.fixture(scope="module")
def certificates() -> trustme.CA:
    return trustme.CA()


def test_tls_round_trips_and_a_wrong_certificate_is_a_connect_error(
    backend: str, certificates: trustme.CA, run: Run
) -> None:
    async def body() -> None:
        async def ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(answer(b"secret", close=True))
            await writer.drain()

        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        certificates.issue_cert("127.0.0.1").configure_cert(server_ctx)
        trusted = ssl.create_default_context()
        certificates.configure_trust(trusted)
        server = Server(ok)
        server.ssl = server_ctx
        async with server:
            url = f"https://127.0.0.1:{server.port}/"
            async with client(backend, verify=trusted) as c:
                assert await outcome(c.post(url, json={})) == "200 secret"
            async with client(backend) as c:  # the system's CAs do not know this one
                assert await outcome(c.post(url, json={})) == "ConnectError"

    run(body())


def test_the_provider_client_sends_through_http1_and_keeps_env_proxies(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client every adapter shares gets this transport within its limits; a proxy
    from the environment is still httpx's own transport; a test's transport stays."""
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")

    async def body() -> None:
        limits = httpx.Limits(max_connections=4, keepalive_expiry=7.0)
        async with provider_client(limits) as c:
            transport = c._transport  # type: ignore[attr-defined]
            assert isinstance(transport, Http1Transport)
            assert (transport.max_connections, transport.keepalive_expiry) == (4, 7.0)
            proxied = c._transport_for_url(httpx.URL("https://api.example.com/v1"))
            assert isinstance(proxied, httpx.AsyncHTTPTransport)  # httpx's, with the proxy
            assert c._transport_for_url(httpx.URL("http://127.0.0.1/")) is transport
        mock = httpx.MockTransport(lambda request: httpx.Response(204))
        async with provider_client(limits, transport=mock) as c:  # tests' transports stay
            assert (await c.get("http://example.invalid/")).status_code == 204

    run(body())


def test_an_idle_hang_up_the_loop_has_not_read_yet_still_opens_a_new_connection(
    backend: str, run: Run
) -> None:
    """The server's FIN is in the kernel, the loop has not run since: the pool must ask
    the socket, as httpcore does, or the next call goes out on a dead connection."""
    listener = socket.create_server(("127.0.0.1", 0))
    hung_up = threading.Event()
    accepted: list[int] = []

    def serve() -> None:
        for n in range(2):
            conn, _ = listener.accept()
            accepted.append(n)
            with conn:
                data = b""
                while not data.endswith(b"{}"):  # the head, then the 2-byte body
                    data += conn.recv(65536)
                conn.sendall(answer(b"ok"))
                if n == 0:
                    time.sleep(0.05)  # the client has read the answer; then hang up
            hung_up.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    async def body() -> None:
        async with client(backend) as c:
            url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
            assert await outcome(c.post(url, json={})) == "200 ok"
            assert hung_up.wait(5)  # blocks the loop: the FIN waits in the kernel
            time.sleep(0.05)  # noqa: ASYNC251 (the point: the loop must not run)
            assert await outcome(c.post(url, json={})) == "200 ok"
            assert accepted == [0, 1]

    try:
        run(body())
    finally:
        thread.join(5)
        listener.close()


def test_the_provider_client_keeps_no_cookie_for_the_next_request(run: Run) -> None:
    """One client serves every owner: a cookie one answer sets is never sent back."""

    async def body() -> None:
        sent: list[str | None] = []

        def answer(request: httpx.Request) -> httpx.Response:
            sent.append(request.headers.get("cookie"))
            return httpx.Response(
                200, headers={"Set-Cookie": "__cf_bm=owner-a; Path=/; Secure; HttpOnly"}
            )

        limits = httpx.Limits(max_connections=4)
        async with provider_client(limits, transport=httpx.MockTransport(answer)) as c:
            for _ in range(3):
                assert (await c.post("https://api.example.com/v1/chat", json={})).is_success
            c.cookies = {"set": "by-hand"}
            c.cookies.set("also", "by-hand")
            c.cookies.update({"and": "by-update"})
            c.cookies["item"] = "by-item"
            await c.post("https://api.example.com/v1/chat", json={})
            assert not c.cookies
        assert sent == [None, None, None, None]
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as plain:
            for _ in range(2):
                await plain.post("https://api.example.com/v1/chat", json={})
        assert sent[-1] == "__cf_bm=owner-a"  # what httpx's own jar would have sent

    run(body())


def test_a_call_given_up_mid_upload_sends_no_more_of_it(backend: str, run: Run) -> None:
    """A call cancelled (the adapters' deadline) while its body is still going out must
    not go on reaching the provider, nor hold the rest in memory: the connection is cut."""

    async def body() -> None:
        received: list[int] = []
        big = 32 * 1024 * 1024  # far more than the socket buffers hold

        async def reads_late(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await asyncio.sleep(1.0)  # the client gives up at 0.3 s
            n = 0
            with contextlib.suppress(ConnectionError):
                while chunk := await reader.read(1 << 20):
                    n += len(chunk)
            received.append(n)

        async with Server(reads_late) as server, client(backend) as c:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.3):
                    await c.post(f"http://127.0.0.1:{server.port}/", content=b"x" * big)
            for _ in range(50):
                if received:
                    break
                await asyncio.sleep(0.1)
        assert received and received[0] < big // 2

    run(body())


def test_one_hop_sends_the_bytes_post_sends_and_reads_the_same_answer(run: Run) -> None:
    """``post_read`` puts on the wire exactly what ``post`` does, and returns the same."""

    async def body() -> None:
        heads: list[bytes] = []

        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                heads.append(head + await reader.readexactly(length))
                writer.write(
                    b"HTTP/1.1 201 Created\r\nx-request-id: r-1\r\ncontent-type: application/json"
                    b'\r\ncontent-length: 12\r\n\r\n{"ok": true}'
                )
                await writer.drain()

        limits = httpx.Limits(max_connections=1)
        async with Server(echo) as server, provider_client(limits) as c:
            assert isinstance(c, ProviderClient) and c.sends_in_one_hop()
            url = f"http://127.0.0.1:{server.port}/v1/chat/completions"
            headers = {"content-type": "application/json", "authorization": "Bearer k"}
            timeout = httpx.Timeout(5.0, connect=1.0)
            plain = await c.post(url, content=b'{"a": 1}', headers=headers, timeout=timeout)
            hop = await c.post_read(url, content=b'{"a": 1}', headers=headers, timeout=timeout)
            assert heads[0] == heads[1]
            for response in (plain, hop):
                assert (response.status_code, response.content) == (201, b'{"ok": true}')
                assert response.headers["x-request-id"] == "r-1"
                assert response.is_closed and response.request.url == url
            assert hop.request.extensions["timeout"] == timeout.as_dict()
            assert server.connections == 1  # the connection went back to the pool
            await c.aclose()
            with pytest.raises(RuntimeError, match="closed"):
                await c.post_read(url, content=b"{}", headers={}, timeout=timeout)

    run(body())


def test_one_hop_uses_the_transport_for_the_url_and_steps_aside_for_hooks(run: Run) -> None:
    """A mounted transport (how httpx routes a proxy from the environment) still applies;
    a client with an event hook, auth or redirects is not one hop, and the adapters
    ``post`` through it instead."""

    async def body() -> None:
        mounted = httpx.MockTransport(lambda request: httpx.Response(200, text="via mount"))
        limits = httpx.Limits(max_connections=1)
        async with ProviderClient(limits=limits, mounts={"https://api.example.com": mounted}) as c:
            r = await c.post_read(
                "https://api.example.com/v1/x", content=b"{}", headers={}, timeout=c.timeout
            )
            assert r.text == "via mount"
            assert c.sends_in_one_hop()
            hooked: list[str] = []

            async def hook(request: httpx.Request) -> None:
                hooked.append(str(request.url))

            c.event_hooks = {"request": [hook]}
            assert not c.sends_in_one_hop()
        assert not ProviderClient(auth=("u", "p")).sends_in_one_hop()
        assert not ProviderClient(follow_redirects=True).sends_in_one_hop()

    run(body())


def test_a_full_pool_waits_for_a_connection_and_then_times_out_as_not_sent(
    backend: str, run: Run
) -> None:
    """One connection allowed: a second call waits for it and goes out on it once it is
    free; while it is held past the pool timeout, the call fails as never sent."""

    async def body() -> None:
        release = asyncio.Event()

        async def held(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                if (await read_request(reader)) == b'"hold"':
                    await release.wait()
                writer.write(answer(b"ok"))
                await writer.drain()

        limits = httpx.Limits(max_connections=1)
        timeout = httpx.Timeout(5.0, pool=0.2)
        async with Server(held) as server, client(backend, limits=limits, timeout=timeout) as c:
            url = f"http://127.0.0.1:{server.port}/"
            first = asyncio.create_task(outcome(c.post(url, json="hold")))
            await asyncio.sleep(0.05)
            assert await outcome(c.post(url, json={})) == "PoolTimeout"
            second = asyncio.create_task(outcome(c.post(url, json={})))
            await asyncio.sleep(0.05)
            release.set()
            assert [await first, await second] == ["200 ok", "200 ok"]
            assert server.connections == 1

    run(body())


def test_a_body_without_length_runs_to_the_close_and_its_connection_is_not_reused(
    backend: str, run: Run
) -> None:
    async def body() -> None:
        async def until_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nall of ")
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(b"it")  # then the handler returns: FIN ends the body

        async with Server(until_close) as server, client(backend) as c:
            url = f"http://127.0.0.1:{server.port}/"
            assert [await outcome(c.post(url, json={})) for _ in range(2)] == ["200 all of it"] * 2
            assert server.connections == 2

    run(body())


def test_an_informational_answer_is_skipped_and_a_close_is_honoured(backend: str, run: Run) -> None:
    async def body() -> None:
        async def early_hints(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(b"HTTP/1.1 103 Early Hints\r\nlink: </a>; rel=preload\r\n\r\n")
            writer.write(answer(b"final", close=True))
            await writer.drain()
            await asyncio.sleep(0.5)  # the client must not wait for this close to answer

        async with Server(early_hints) as server, client(backend) as c:
            url = f"http://127.0.0.1:{server.port}/"
            for _ in range(2):
                async with asyncio.timeout(0.4):
                    assert await outcome(c.post(url, json={})) == "200 final"
            assert server.connections == 2  # "connection: close": a new one each time

    run(body())


@pytest.mark.parametrize(
    "garbage",
    [b"NOT HTTP\r\n\r\n", b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n"],
)
def test_a_malformed_answer_is_a_remote_protocol_error(
    backend: str, run: Run, garbage: bytes
) -> None:
    async def body() -> None:
        async def malformed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(garbage)
            await writer.drain()
            await asyncio.sleep(0.5)

        assert await post_once(malformed, backend, timeout=2.0) == "RemoteProtocolError"

    run(body())


def test_the_read_timeout_counts_from_the_last_byte_not_the_request(backend: str, run: Run) -> None:
    """httpx's read timeout bounds each wait for more of the answer: an answer that
    trickles in, never silent for the timeout, arrives whole however long it takes."""

    async def body() -> None:
        async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\n")
            for piece in (b"sl", b"ow", b"ly"):
                await writer.drain()
                await asyncio.sleep(0.15)
                writer.write(piece)
            await writer.drain()

        assert await post_once(trickle, backend, timeout=0.3) == "200 slowly"

    run(body())


def test_a_call_given_up_while_waiting_leaves_no_connection_to_reuse(
    backend: str, run: Run
) -> None:
    """The answer to a call cancelled mid-wait must never be read as the next call's."""

    async def body() -> None:
        async def late(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            n = 0
            while True:
                await read_request(reader)
                n += 1
                if n == 1 and server.connections == 1:
                    await asyncio.sleep(0.2)  # the first call has given up by now
                    writer.write(answer(b"late"))
                else:
                    writer.write(answer(b"fresh"))
                await writer.drain()

        server = Server(late)
        async with server, client(backend) as c:
            url = f"http://127.0.0.1:{server.port}/"
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1):
                    await c.post(url, json={})
            # At once: on the old connection, the late answer would come first.
            assert await outcome(c.post(url, json={})) == "200 fresh"
            assert server.connections == 2

    run(body())


def test_an_idle_connection_past_its_keepalive_expiry_is_not_reused(backend: str, run: Run) -> None:
    async def body() -> None:
        async def keep(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                await read_request(reader)
                writer.write(answer(b"ok"))
                await writer.drain()

        limits = httpx.Limits(keepalive_expiry=0.1)
        async with Server(keep) as server, client(backend, limits=limits) as c:
            url = f"http://127.0.0.1:{server.port}/"
            assert [await outcome(c.post(url, json={})) for _ in range(2)] == ["200 ok"] * 2
            assert server.connections == 1
            await asyncio.sleep(0.25)
            assert await outcome(c.post(url, json={})) == "200 ok"
            assert server.connections == 2

    run(body())


@pytest.mark.parametrize("backend", ["http1", "one-hop"])
def test_an_answer_with_more_behind_it_leaves_no_connection_to_reuse(
    backend: str, run: Run
) -> None:
    """Bytes of another message right behind an answer, in the same read, are never the
    next request's answer. (httpcore hands them to it: this one is not differential.)"""

    async def body() -> None:
        async def extra(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            first = True
            while True:
                await read_request(reader)
                if first and server.connections == 1:
                    writer.write(answer(b"ok") + b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nst")
                else:
                    writer.write(answer(b"fresh"))
                first = False
                await writer.drain()

        server = Server(extra)
        async with server, client(backend) as c:
            url = f"http://127.0.0.1:{server.port}/"
            assert [await outcome(c.post(url, json={})) for _ in range(2)] == [
                "200 ok",
                "200 fresh",
            ]
            assert server.connections == 2

    run(body())


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\ncontent-length: 2\n\n",  # lines ended by a bare LF
        b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\ntransfer-encoding: chunked\r\n\r\n",
    ],
)
def test_answers_h11_reads_are_read(backend: str, run: Run, head: bytes) -> None:
    """A call that ran is not lost to a stricter parser than httpcore's."""

    async def body() -> None:
        async def lenient(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(head + (b"2\r\nok\r\n0\r\n\r\n" if b"chunked" in head else b"ok"))
            await writer.drain()

        assert await post_once(lenient, backend) == "200 ok"

    run(body())


@pytest.mark.parametrize(
    ("status_line", "request_headers"),
    [
        (b"HTTP/1.1 200 OK", {"connection": "close"}),  # the request asked to close
        (b"HTTP/1.0 200 OK", {}),  # an HTTP/1.0 answer, even with keep-alive
    ],
)
def test_a_connection_either_side_would_close_is_not_reused(
    backend: str, run: Run, status_line: bytes, request_headers: dict[str, str]
) -> None:
    async def body() -> None:
        async def keep(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                await read_request(reader)
                writer.write(
                    status_line + b"\r\nconnection: keep-alive\r\ncontent-length: 2\r\n\r\nok"
                )
                await writer.drain()

        async with Server(keep) as server, client(backend) as c:
            url = f"http://127.0.0.1:{server.port}/"
            for _ in range(2):
                got = await outcome(c.post(url, content=b"{}", headers=request_headers))
                assert got == "200 ok"
            assert server.connections == 2

    run(body())


def test_an_international_host_is_dialled_as_httpx_encoded_it(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``faß.de`` is ``xn--fa-hia.de`` (IDNA 2008, httpx's encoding), not asyncio's IDNA
    2003 ``fass.de``: another host."""
    dialled: list[str] = []

    async def refuse(self: Any, factory: Any, host: str, *args: Any, **kwargs: Any) -> Any:
        dialled.append(host)
        raise ConnectionRefusedError("refused")

    async def body() -> None:
        loop = asyncio.get_running_loop()
        monkeypatch.setattr(type(loop), "create_connection", refuse)
        async with client("http1") as c:
            assert await outcome(c.get("http://faß.de/")) == "ConnectError"

    run(body())
    assert dialled == ["xn--fa-hia.de"]


@pytest.mark.parametrize(("lines", "expected"), [(48, "200 ok"), (2048, "RemoteProtocolError")])
def test_an_answer_head_past_100_kib_unfinished_is_refused_as_httpcore_refuses_it(
    backend: str, run: Run, lines: int, expected: str
) -> None:
    """48 KiB of headers are read; 2 MiB, sent a line at a time, are refused without
    waiting for their end (httpcore: h11's 100 KiB ``max_incomplete_event_size``)."""

    async def body() -> None:
        async def long_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\n")
            for n in range(lines):
                writer.write(b"x-pad-%d: %s\r\n" % (n, b"a" * 1000))
                if n % 16 == 0:
                    await writer.drain()
            writer.write(b"content-length: 2\r\n\r\nok")
            await writer.drain()
            await asyncio.sleep(1.0)

        assert await post_once(long_head, backend, timeout=2.0) == expected

    run(body())


def test_an_informational_answer_does_not_count_against_the_final_head(
    backend: str, run: Run
) -> None:
    """A 60 KiB ``103`` and 50 KiB of the final head sent in one write: h11 counts only
    the final head's unparsed bytes, so the answer is read."""

    async def body() -> None:
        async def hints(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            pad = b"".join(b"x-hint-%d: %s\r\n" % (n, b"h" * 1000) for n in range(60))
            head = b"".join(b"x-pad-%d: %s\r\n" % (n, b"a" * 1000) for n in range(50))
            writer.write(b"HTTP/1.1 103 Early Hints\r\n" + pad + b"\r\nHTTP/1.1 200 OK\r\n" + head)
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(b"content-length: 2\r\n\r\nok")
            await writer.drain()
            await asyncio.sleep(0.5)

        assert await post_once(hints, backend, timeout=2.0) == "200 ok"

    run(body())
