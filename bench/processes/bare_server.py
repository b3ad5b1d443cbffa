"""The bare server: a durable sync job's floor in Python, the store's two statements and
the upstream's call, nothing else.

``python -m bench.processes.bare_server PORT DSN UPSTREAM`` serves, on uvloop with
httptools and asyncpg as the gateway does, per request:

1. ``create.CREATE``: the job, its first attempt claimed, its events, one commit;
2. the upstream's Chat Completions call over a kept-alive connection, its answer decoded;
3. ``finalize.FINALIZE_ALONE``: the compare-and-swap decision, one commit;
4. a 201 with the decided job's status.

No API key, schema, fingerprint, prompt, lease timer, metric, log line or framework; it
keeps none of onejob's guarantees beyond what those two statements keep. ``bench.compare``
and ``bench.bare_path`` start it (``bench.lib.p3.bare_server``) and measure it beside the
gateway.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import sys
import uuid
from typing import Any

import httptools

from bench.lib.children import say
from gateway.store.create import CREATE
from gateway.store.finalize import FINALIZE_ALONE

_FINGERPRINT = "f" * 64
_DETAILS = [
    json.dumps({"contract": "ticket-triage@1", "provider": "upstream"}),
    json.dumps({"number": 1, "provider": "upstream", "reason": "initial"}),
    json.dumps({"worker": "bare", "read_version": 1, "in_process": True}),
]
_KINDS = ["job_created", "attempt_created", "attempt_running"]


class _Upstream:
    """One kept-alive HTTP/1.1 connection to the upstream; one call at a time."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.host, self.port = host, int(port)
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def call(self, body: bytes) -> bytes:
        if self.streams is None:
            self.streams = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.streams
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: upstream\r\n"
            b"content-type: application/json\r\ncontent-length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return await reader.readexactly(length)


class _Server(asyncio.Protocol):
    """HTTP/1.1 with httptools: each complete request runs ``_Bare.job`` in turn."""

    def __init__(self, bare: _Bare) -> None:
        self.bare = bare
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.key = ""
        self.body = bytearray()
        self.jobs: set[asyncio.Future[None]] = set()  # referenced until done

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"idempotency-key":
            self.key = value.decode()

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        body, self.body = bytes(self.body), bytearray()
        job = asyncio.ensure_future(self.bare.job(self, self.key, body))
        self.jobs.add(job)
        job.add_done_callback(self.jobs.discard)


class _Bare:
    """The two statements and the call, on one database connection."""

    def __init__(self, conn: Any, upstream: _Upstream) -> None:
        self.conn = conn
        self.upstream = upstream

    async def job(self, server: _Server, key: str, body: bytes) -> None:
        request = json.loads(body)
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        job_id, attempt_id = f"job_{uuid.uuid4().hex}", f"att_{uuid.uuid4().hex}"
        created = await self.conn.fetch(
            CREATE,
            job_id,
            "bare",
            key,
            _FINGERPRINT,
            request["contract"],
            "upstream",
            None,
            json.dumps(request["input"]),
            "running",
            now,
            attempt_id,
            "running",
            1,
            "bare",
            now + dt.timedelta(seconds=15),
            now + dt.timedelta(seconds=30),
            now,
            [None, attempt_id, attempt_id],
            _KINDS,
            _DETAILS,
        )
        status = "replayed"
        if created and created[0]["created"]:
            call = json.dumps(
                {"model": "bench-gpt", "messages": [{"role": "user", "content": body.decode()}]}
            )
            answer = json.loads(await self.upstream.call(call.encode()))
            result = json.loads(answer["choices"][0]["message"]["content"])
            decided = await self.conn.fetch(
                FINALIZE_ALONE,
                attempt_id,
                json.dumps(result),
                dt.datetime.now(dt.UTC).replace(tzinfo=None),
                "req-bench",
                answer["model"],
            )
            status = decided[0]["j_status"] if decided else "lost"
        out = json.dumps({"id": job_id, "status": status}, separators=(",", ":")).encode()
        assert server.transport is not None
        server.transport.write(
            b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: "
            + str(len(out)).encode()
            + b"\r\n\r\n"
            + out
        )


async def _serve(port: int, dsn: str, upstream: str) -> None:
    """Run the bare server on ``port`` until killed."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    bare = _Bare(conn, _Upstream(upstream))
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Server(bare), "127.0.0.1", port)
    say(f"bare server on {port}")
    await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    """Serve on ``PORT`` with the database ``DSN`` (libpq), calling ``UPSTREAM``."""
    parser = argparse.ArgumentParser(prog="python -m bench.processes.bare_server")
    parser.add_argument("port", type=int)
    parser.add_argument("dsn", help="the migrated PostgreSQL database (a libpq URL)")
    parser.add_argument("upstream", help="the upstream's base URL")
    args = parser.parse_args(argv)
    serve(args.port, args.dsn, args.upstream)
    return 0


def serve(port: int, dsn: str, upstream: str) -> None:
    """Run the bare server on uvloop until interrupted."""
    import uvloop

    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(_serve(port, dsn, upstream))


if __name__ == "__main__":
    sys.exit(main())
