"""The floor of a durable sync job in Python: the gateway's two statements and its call, bare.

``python -m scenarios.load.bare_path [--duration 8] [--rounds 3]`` starts the zero-latency
upstream, onejob's gateway (one worker, dispatcher on, PostgreSQL) and a bare server on a
database of its own, and drives all three at one connection in ``--rounds`` alternated
rounds (``compare.p3_rounds``; ``compare`` runs the same rounds on PostgreSQL). Per
request the bare server does what a sync job cannot do without, and nothing else, on
uvloop with httptools and asyncpg as the gateway does:

1. ``create.CREATE``: the job, its first attempt claimed, its events, one commit;
2. the upstream's Chat Completions call over a kept-alive connection, its answer decoded;
3. ``finalize.FINALIZE_ALONE``: the compare-and-swap decision, one commit;
4. a 201 with the decided job's status.

No API key, schema, fingerprint, prompt, lease timer, metric, log line or framework. The
gateway's P3 (sync p50 less the upstream's) over the bare server's is the share of P3
that is onejob's own on this host, whatever the host's speed: on a slow host both rise.
It prints each round and writes JSON (``--out``). A measurement, not a test; the bare
server keeps none of onejob's guarantees beyond what those two statements keep.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import httptools

from gateway.store.create import CREATE
from gateway.store.finalize import FINALIZE_ALONE
from scenarios.load import compare, duel
from scenarios.load.bench import say, write_report

ROOT = Path(__file__).resolve().parents[2]
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


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the upstream, the gateway and the bare server, run the rounds (those of
    ``compare``'s P3, with the bare server in them); return the report."""
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bare-")))
        upstream = await duel.start_upstream(stack, work)
        up_script = compare.upstream_script(work)
        gw_args = argparse.Namespace(mode="sync", database="postgresql")
        pid, gateway, gw_script, _ = await duel.start_side(stack, "new", ROOT, upstream, gw_args)
        compare.run_wrk(gateway, gw_script, connections=1, duration=2, prefix="warm")
        async with compare.bare_server(upstream, work) as bare:
            rounds = compare.p3_rounds(
                "postgresql", (gateway, gw_script, pid), upstream, up_script, args, bare
            )
    return {"commit": compare.commit(), "rounds": rounds, **compare.p3_floor(rounds)}


def main(argv: list[str] | None = None) -> int:
    """Serve (``--serve PORT DSN UPSTREAM``, the child) or measure, print and write JSON."""
    parser = argparse.ArgumentParser(prog="python -m scenarios.load.bare_path")
    parser.add_argument(
        "--serve",
        nargs=3,
        metavar=("PORT", "DSN", "UPSTREAM"),
        help="run the bare server itself (this command and compare start it so)",
    )
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per run")
    parser.add_argument(
        "--rounds", type=compare.odd_count, default=3, help="alternated rounds (odd)"
    )
    parser.add_argument(
        "--out", default=str(ROOT / "reports/out/bare_path.json"), help="the JSON report"
    )
    args = parser.parse_args(argv)
    if args.serve:
        import uvloop

        port, dsn, upstream = args.serve
        with contextlib.suppress(KeyboardInterrupt):
            uvloop.run(_serve(int(port), dsn, upstream))
        return 0
    out = asyncio.run(run(args))
    say(
        f"P3 at one connection: onejob {out['onejob_p3_ms']} ms, bare {out['bare_p3_ms']} ms"
        f" (rounds {out['above_upstream_ms']}); onejob / bare {out['onejob_over_bare']}x"
        f" (rounds {out['rounds_onejob_over_bare']})"
    )
    write_report(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
