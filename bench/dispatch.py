"""Dispatcher-only benchmark: attempts per second and CPU per attempt, no HTTP in front.

``python -m bench.dispatch [--database-url URL] [--attempts N] [--runners R]``
starts a zero-delay simulator process, inserts N jobs straight through the store (each
with its ``starting`` attempt), then starts a ``DispatcherService`` in this process and
times how long the runners take to claim, call and finalize all of them. Reported:
attempts/s, the dispatcher's overhead per attempt (wall time minus provider time, from
its own histograms) and this process's CPU time per attempt (dispatcher, store and HTTP
client; the simulator runs elsewhere). Appends to ``reports/out/dispatch_bench.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.lib.children import ROOT, child, free_port, ready
from bench.lib.loads import CASES, CONTRACT
from contracts.loader import load_catalog
from contracts.registry import CertificationRegistry
from gateway.background import DispatcherService
from gateway.dispatch.routing import Routes
from gateway.domain.fingerprint import fingerprint
from gateway.domain.records import NewJob
from gateway.metrics import Metrics
from gateway.notify import ChangeHub
from gateway.settings import DatabaseConfig, Settings, ShortcutsConfig
from gateway.store import open_store, upgrade_database

DRAIN_TIMEOUT = 600.0  # seconds to finish every attempt
DRAIN_POLL = 0.01  # seconds between progress checks
INSERT_CONCURRENCY = 8  # jobs inserted at once


def _succeeded(metrics: Metrics) -> int:
    return int(
        sum(
            s.value
            for f in metrics.attempts.collect()
            for s in f.samples
            if s.name.endswith("_total") and s.labels.get("outcome") == "succeeded"
        )
    )


def _sum(metric: Any) -> float:
    return float(
        sum(s.value for f in metric.collect() for s in f.samples if s.name.endswith("_sum"))
    )


async def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Insert the jobs, run the dispatcher until all are decided, return the numbers."""
    sim_port = free_port()
    sim_url = f"http://127.0.0.1:{sim_port}"
    database_url = args.database_url or f"sqlite+aiosqlite:///{work / 'dispatch.db'}"
    settings = Settings.model_validate(
        {
            "database_url": database_url,
            "instance_id": f"dbench-{os.getpid()}",
            "certifications_path": str(work / "certifications.json"),
            "providers": {
                "sim-openai": {
                    "protocol": "openai",
                    "base_url": f"{sim_url}/p/sim-openai/v1",
                    "model": "sim-gpt",
                    "timeout": 30.0,
                }
            },
            "routes": {"*": {"primary": "sim-openai"}},
            "dispatcher": {"runners": args.runners, "poll_interval": 1.0},
        }
    )
    inputs = [json.loads(ln)["input"] for ln in CASES.read_text().splitlines() if ln.strip()]
    await upgrade_database(database_url)
    hub = ChangeHub()
    store = await open_store(
        database_url,
        hub=hub,
        shortcuts=ShortcutsConfig.from_env(),
        database=DatabaseConfig.from_env(),
    )
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
    try:
        with child(sim_cmd, work / "sim.log") as sim:
            await ready(f"{sim_url}/_sim/health", sim, work / "sim.log")
            tag = uuid.uuid4().hex[:8]
            gate = asyncio.Semaphore(INSERT_CONCURRENCY)

            async def insert(n: int) -> None:
                inp = inputs[n % len(inputs)]
                async with gate:
                    await store.create_or_get(
                        NewJob(
                            owner_id=f"dbench-{tag}",
                            idempotency_key=f"{tag}-{n}",
                            fingerprint=fingerprint(CONTRACT, inp, None),
                            contract=CONTRACT,
                            provider="sim-openai",
                            requested_provider=None,
                            input=inp,
                        )
                    )

            await asyncio.gather(*(insert(n) for n in range(args.attempts)))
            metrics = Metrics()
            catalog = load_catalog()
            service = DispatcherService(
                settings,
                store=store,
                hub=hub,
                catalog=catalog,
                routes=Routes(
                    settings,
                    catalog,
                    settings.providers,
                    CertificationRegistry(settings.certifications_path),
                ),
                metrics=metrics,
            )
            print(
                f"dispatching {args.attempts} attempts with {args.runners} runners "
                f"({database_url.split('://', 1)[0]})",
                file=sys.stderr,
            )
            wall0, cpu0 = time.perf_counter(), time.process_time()
            await service.start()
            for _ in range(int(DRAIN_TIMEOUT / DRAIN_POLL)):
                if _succeeded(metrics) >= args.attempts:
                    break
                await asyncio.sleep(DRAIN_POLL)
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            await service.stop()
    finally:
        await store.close()
    finished = _succeeded(metrics)
    provider_s = _sum(metrics.provider_seconds)
    overhead_s = _sum(metrics.overhead_seconds)
    return {
        "database": database_url.split("://", 1)[0],
        "attempts": args.attempts,
        "succeeded": finished,
        "runners": args.runners,
        "wall_s": round(wall, 3),
        "attempts_per_s": round(finished / wall, 1),
        "provider_call_ms_mean": round(provider_s / finished * 1000, 3) if finished else None,
        "dispatch_overhead_ms_mean": round(overhead_s / finished * 1000, 3) if finished else None,
        "cpu_ms_per_attempt": round(cpu / finished * 1000, 3) if finished else None,
        "loadavg_1m_at_end": os.getloadavg()[0],
        "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the dispatcher-only benchmark and print its numbers."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.dispatch",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--database-url", help="default: a fresh SQLite file in a temp dir")
    parser.add_argument("--attempts", type=int, default=500)
    parser.add_argument("--runners", type=int, default=8)
    parser.add_argument("--out", default=str(ROOT / "reports/out/dispatch_bench.json"))
    args = parser.parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so the child processes are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="onejob-dbench-") as tmp:
        report = asyncio.run(run(args, Path(tmp)))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    runs = json.loads(out.read_text()) if out.exists() else []
    out.write_text(json.dumps([*runs, report], indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report))
    return 0 if report["succeeded"] == report["attempts"] else 1


if __name__ == "__main__":
    sys.exit(main())
