"""End-to-end benchmark: jobs per second through gateway, dispatcher and a zero-delay simulator.

``python -m bench.end_to_end [--database-url URL] [--jobs N] [--concurrency C]`` starts
a simulator process and a gateway process (with its dispatcher) on loopback, creates N jobs
with ``Prefer: wait`` from C concurrent clients, and reports:

- jobs/s end to end and per-job latency (POST until the answer with the job ``succeeded``);
- the dispatcher's overhead per attempt, from the gateway's own histograms: attempt wall
  time (claim to decision committed) minus time inside the provider call, and the queue
  time from attempt creation until a runner claimed it.

It is a measurement, not a test: it asserts only that every job succeeded, and writes
``reports/out/bench.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.lib.children import ROOT, child, free_port, ready
from bench.lib.gateways import GATEWAY_MODULE
from bench.lib.loads import CASES, CONTRACT
from bench.lib.report import interpreter
from gateway.settings import DatabaseConfig, Settings, ShortcutsConfig

WAIT_SECONDS = 30  # Prefer: wait per request
WARMUP_JOBS = 20


def scrape(text: str) -> dict[str, float]:
    """Flatten the metrics we report on into ``name{labels}`` -> value."""
    flat: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "le")
            if sample.name.endswith("_bucket"):
                labels += f",le={sample.labels['le']}"
            flat[f"{sample.name}{{{labels}}}"] = sample.value
    return flat


def delta(after: dict[str, float], before: dict[str, float], key: str) -> float:
    return after.get(key, 0.0) - before.get(key, 0.0)


def hist_summary(after: dict[str, float], before: dict[str, float], name: str) -> dict[str, Any]:
    """Average and bucket-bounded p50/p95 (upper bucket edge) of a histogram, in ms."""
    count = delta(after, before, f"{name}_count{{}}")
    total = delta(after, before, f"{name}_sum{{}}")
    edges = sorted(
        (float(k.rsplit("le=", 1)[1].rstrip("}")), delta(after, before, k))
        for k in after
        if k.startswith(f"{name}_bucket{{")
    )

    def bound(q: float) -> float | None:
        for edge, cumulative in edges:
            if count and cumulative >= q * count:
                return edge * 1000
        return None

    return {
        "count": int(count),
        "mean_ms": round(total / count * 1000, 3) if count else None,
        "p50_le_ms": bound(0.50),
        "p95_le_ms": bound(0.95),
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@contextlib.asynccontextmanager
async def stack(args: argparse.Namespace, work: Path) -> AsyncIterator[dict[str, Any]]:
    """Start the simulator and the gateway; yield their URLs and the API key."""
    from gateway.store import open_store, upgrade_database

    sim_port, gw_port = free_port(), free_port()
    sim_url = f"http://127.0.0.1:{sim_port}"
    database_url = args.database_url or f"sqlite+aiosqlite:///{work / 'bench.db'}"
    settings = Settings.model_validate(
        {
            "database_url": database_url,
            "port": gw_port,
            "instance_id": f"bench-{os.getpid()}",
            "log_level": "WARNING",
            "certifications_path": str(work / "certifications.json"),
            "providers": {
                "sim-openai": {
                    "protocol": "openai",
                    "base_url": f"{sim_url}/p/sim-openai/v1",
                    "model": "sim-gpt",
                    "timeout": 30.0,
                },
                "sim-anthropic": {
                    "protocol": "anthropic",
                    "base_url": f"{sim_url}/p/sim-anthropic",
                    "model": "sim-claude",
                    "timeout": 30.0,
                },
            },
            "routes": {"*": {"primary": "sim-openai", "fallbacks": ["sim-anthropic"]}},
            "dispatcher": {"runners": args.runners, "poll_interval": 1.0},
        }
    )
    settings_file = work / "settings.json"
    settings_file.write_text(settings.model_dump_json(), encoding="utf-8")
    await upgrade_database(database_url)
    store = await open_store(
        database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        _, key = await store.create_api_key(f"bench-{uuid.uuid4().hex[:8]}", frozenset({"jobs"}))
    finally:
        await store.close()
    sim_log, gw_log = work / "sim.log", work / "gateway.log"
    sim_cmd = [
        "-c",
        "from cli.main import main; raise SystemExit(main())",
        "sim",
        "serve",
        "--port",
        str(sim_port),
        "--log-level",
        "warning",
    ]
    gw_cmd = [
        "-m",
        GATEWAY_MODULE,
        "--settings",
        str(settings_file),
    ]
    with child(sim_cmd, sim_log) as sim, child(gw_cmd, gw_log) as gw:
        await ready(f"{sim_url}/_sim/health", sim, sim_log)
        await ready(f"http://127.0.0.1:{gw_port}/healthz", gw, gw_log)
        yield {
            "gateway": f"http://127.0.0.1:{gw_port}",
            "metrics": f"http://127.0.0.1:{gw_port}/metrics",
            "key": key,
            "database": database_url.split("://", 1)[0],
        }


async def drive(
    client: httpx.AsyncClient,
    base: str,
    key: str,
    jobs: int,
    concurrency: int,
    tag: str,
    progress: bool,
) -> tuple[list[float], float, dict[str, int]]:
    """Create ``jobs`` jobs from ``concurrency`` clients; return latencies, wall time, statuses."""
    inputs = [json.loads(ln)["input"] for ln in CASES.read_text().splitlines() if ln.strip()]
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(jobs):
        queue.put_nowait(n)
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    step = max(1, jobs // 10)

    async def client_loop() -> None:
        while True:
            try:
                n = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            began = time.perf_counter()
            r = await client.post(
                f"{base}/v1/jobs",
                json={"contract": CONTRACT, "input": inputs[n % len(inputs)]},
                headers={
                    "Authorization": f"Bearer {key}",
                    "Idempotency-Key": f"{tag}-{n}",
                    "Prefer": f"wait={WAIT_SECONDS}",
                },
            )
            latencies.append(time.perf_counter() - began)
            status = r.json().get("status", f"http-{r.status_code}")
            statuses[status] = statuses.get(status, 0) + 1
            if progress and len(latencies) % step == 0:
                print(f"  {len(latencies)}/{jobs} jobs", file=sys.stderr, flush=True)

    began = time.perf_counter()
    await asyncio.gather(*(client_loop() for _ in range(concurrency)))
    return latencies, time.perf_counter() - began, statuses


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    """Run the benchmark and return its report."""
    with tempfile.TemporaryDirectory(prefix="onejob-bench-") as tmp:
        async with stack(args, Path(tmp)) as env:
            limits = httpx.Limits(max_connections=args.concurrency + 4)
            async with httpx.AsyncClient(timeout=WAIT_SECONDS + 30, limits=limits) as client:
                tag = uuid.uuid4().hex[:8]
                await drive(
                    client,
                    env["gateway"],
                    env["key"],
                    WARMUP_JOBS,
                    min(args.concurrency, WARMUP_JOBS),
                    f"warm-{tag}",
                    False,
                )
                before = scrape((await client.get(env["metrics"])).text)
                print(
                    f"driving {args.jobs} jobs with {args.concurrency} clients "
                    f"({env['database']}, {args.runners} runners)",
                    file=sys.stderr,
                )
                latencies, wall, statuses = await drive(
                    client, env["gateway"], env["key"], args.jobs, args.concurrency, tag, True
                )
                after = scrape((await client.get(env["metrics"])).text)
    provider = {
        k: v
        for k, v in (
            (
                "sum",
                sum(
                    delta(after, before, f"onejob_provider_call_seconds_sum{{provider={p}}}")
                    for p in ("sim-openai", "sim-anthropic")
                ),
            ),
            (
                "count",
                sum(
                    delta(after, before, f"onejob_provider_call_seconds_count{{provider={p}}}")
                    for p in ("sim-openai", "sim-anthropic")
                ),
            ),
        )
    }
    return {
        "database": env["database"],
        "jobs": args.jobs,
        "concurrency": args.concurrency,
        "runners": args.runners,
        "statuses": statuses,
        "wall_s": round(wall, 3),
        "jobs_per_s": round(args.jobs / wall, 1),
        "latency_ms": {
            "p50": round(percentile(latencies, 0.50) * 1000, 1),
            "p95": round(percentile(latencies, 0.95) * 1000, 1),
            "p99": round(percentile(latencies, 0.99) * 1000, 1),
            "mean": round(statistics.fmean(latencies) * 1000, 1),
        },
        "provider_call_ms_mean": round(provider["sum"] / provider["count"] * 1000, 3)
        if provider["count"]
        else None,
        "dispatch_overhead": hist_summary(after, before, "onejob_dispatch_overhead_seconds"),
        "attempt_queue": hist_summary(after, before, "onejob_attempt_queue_seconds"),
        "machine": {
            **interpreter(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_1m_at_end": os.getloadavg()[0],
        },
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the summary, write ``reports/out/bench.json``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.end_to_end",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--database-url", help="default: a fresh SQLite file in a temp dir")
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--runners", type=int, default=16)
    parser.add_argument("--out", default=str(ROOT / "reports/out/bench.json"))
    args = parser.parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so the child processes are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    report = asyncio.run(bench(args))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    runs = json.loads(out.read_text()) if out.exists() else []
    runs = [
        r
        for r in (runs if isinstance(runs, list) else [])
        if r.get("database") != report["database"]
    ] + [report]
    out.write_text(json.dumps(runs, indent=2) + "\n", encoding="utf-8")
    overhead, queue = report["dispatch_overhead"], report["attempt_queue"]
    print(
        f"{report['database']}: {report['jobs']} jobs in {report['wall_s']} s = "
        f"{report['jobs_per_s']} jobs/s; latency p50 {report['latency_ms']['p50']} ms, "
        f"p95 {report['latency_ms']['p95']} ms; provider call mean "
        f"{report['provider_call_ms_mean']} ms; dispatcher overhead per attempt mean "
        f"{overhead['mean_ms']} ms (p95 <= {overhead['p95_le_ms']} ms); queue mean "
        f"{queue['mean_ms']} ms; statuses {report['statuses']}"
    )
    print(f"wrote {out}", file=sys.stderr)
    return 0 if report["statuses"] == {"succeeded": report["jobs"]} else 1


if __name__ == "__main__":
    sys.exit(main())
