"""What one provider call costs the gateway's CPU in the HTTP client alone.

``python -m bench.client [--calls N] [--concurrency C ...]`` starts the
zero-latency upstream (``bench.processes.upstream``) and, in this one process on uvloop,
sends N Chat Completions POSTs at each concurrency through:

- ``provider``: the client the adapters share (``providers.client.provider_client``,
  httpx over ``Http1Transport``) through ``post_read``, as the dispatcher sends;
- ``httpx``: a plain ``httpx.AsyncClient`` (httpcore on anyio), for reference;
- ``aiohttp``: aiohttp's own ``ClientSession`` (a dev dependency), for reference: the
  library the provider client's transport was built on before ``Http1Transport``.

Each client runs once to warm up and is then measured, in the order given, twice
(A B C A B C) so this shared host's drift shows. It prints the calls per second and the
process CPU per call, and writes ``reports/out/client_bench.json``. It is a
measurement, not a test: it asserts only that every answer was a 200.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import resource
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from bench.lib.children import ROOT, child, free_port, ready, say
from bench.lib.gateways import UPSTREAM_MODULE
from bench.lib.report import write_report
from providers.client import ProviderClient, provider_client

BODY = json.dumps(
    {"model": "bench-gpt", "messages": [{"role": "user", "content": "My card was charged twice"}]}
).encode()
HEADERS = {"content-type": "application/json"}
ROUNDS = 2

Call = Callable[[], Awaitable[None]]


def cpu_seconds() -> float:
    """Return this process's user+system CPU seconds so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def drive(call: Call, calls: int, concurrency: int) -> dict[str, float]:
    """Make ``calls`` calls from ``concurrency`` tasks; return calls/s and CPU µs per call."""
    remaining = iter(range(calls))

    async def worker() -> None:
        for _ in remaining:
            await call()

    began, cpu = time.perf_counter(), cpu_seconds()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall, spent = time.perf_counter() - began, cpu_seconds() - cpu
    return {"calls_per_s": round(calls / wall, 1), "cpu_us_per_call": round(spent * 1e6 / calls, 1)}


async def clients(url: str, concurrency: int) -> tuple[dict[str, Call], list[Call]]:
    """Return the clients' call functions and what to close afterwards."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    timeout = httpx.Timeout(30.0)
    provider = provider_client(limits)
    assert isinstance(provider, ProviderClient) and provider.sends_in_one_hop()
    plain = httpx.AsyncClient(limits=limits, timeout=timeout)

    async def via_provider() -> None:
        r = await provider.post_read(url, content=BODY, headers=HEADERS, timeout=timeout)
        assert r.status_code == 200, r.status_code

    async def via_httpx() -> None:
        r = await plain.post(url, content=BODY, headers=HEADERS)
        assert r.status_code == 200, r.status_code

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency))

    async def via_aiohttp() -> None:
        async with session.post(url, data=BODY, headers=HEADERS) as r:
            await r.read()
            assert r.status == 200, r.status

    calls: dict[str, Call] = {"provider": via_provider, "httpx": via_httpx, "aiohttp": via_aiohttp}
    return calls, [provider.aclose, plain.aclose, session.close]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the upstream, measure every client at every concurrency, stop the upstream."""
    work = Path(tempfile.mkdtemp(prefix="onejob-client-bench-"))
    port = free_port()
    log = work / "upstream.log"
    report: dict[str, Any] = {
        "python": platform.python_version(),
        "calls": args.calls,
        "rounds": ROUNDS,
        "runs": {},
    }
    with child(["-m", UPSTREAM_MODULE, "--port", str(port)], log) as upstream:
        await ready(f"http://127.0.0.1:{port}/healthz", upstream, log)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        for concurrency in args.concurrency:
            calls, closing = await clients(url, concurrency)
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in calls}
            try:
                for call in calls.values():
                    await drive(call, max(args.calls // 10, 1), concurrency)  # warm-up
                for n in range(ROUNDS):
                    for name, call in calls.items():
                        runs[name].append(await drive(call, args.calls, concurrency))
                        got = runs[name][-1]
                        say(
                            f"[{concurrency} concurrent] {name} round {n + 1}/{ROUNDS}:"
                            f" {got['calls_per_s']} calls/s, {got['cpu_us_per_call']} µs CPU/call"
                        )
            finally:
                for close in closing:
                    await close()
            report["runs"][str(concurrency)] = runs
    return report


def summary(report: dict[str, Any]) -> str:
    """One line per concurrency: each client's CPU per call, best of the rounds."""
    lines = [f"client CPU per call, best of {ROUNDS} rounds of {report['calls']} calls:"]
    for concurrency, runs in report["runs"].items():
        cells = [
            f"{name} {min(r['cpu_us_per_call'] for r in rs):.0f} µs" for name, rs in runs.items()
        ]
        lines.append(f"  {concurrency:>3} concurrent: " + ", ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the summary and write the JSON report."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.client", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--calls", type=int, default=4000, help="calls per measured run")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--out", type=Path, default=ROOT / "reports/out/client_bench.json")
    args = parser.parse_args(argv)
    import uvloop

    report = uvloop.run(run(args))
    print(summary(report))
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
