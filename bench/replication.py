"""Sync jobs on a primary with a synchronous standby, beside a single PostgreSQL, in one run.

``python -m bench.replication [--connections 16] [--duration 6] [--rounds 4]`` starts two
gateways with the same zero-latency upstream: one on a fresh database of the machine's
PostgreSQL (``single``), one on a two-node pg_auto_failover formation on loopback whose
primary waits for its standby's flush on every commit (``synchronous``: the set-up that
keeps an acknowledged job through a failover, docs/operations.md, High availability),
through its multi-host URL. It drives one at a time with ``wrk`` (sync jobs: ``Prefer:
wait``), alternating the order each round, and prints per figure (req/s, p50, p99, the
gateway's CPU per job) both medians and the median of the rounds' ratios, synchronous
over single; JSON to ``--out``. Root is needed (the formation runs as ``postgres``), and
``pg_autoctl`` (Debian: postgresql-15-auto-failover). It is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.lib.children import ROOT, free_port, say
from bench.lib.databases import database, prepare
from bench.lib.gateways import gateway, gateway_settings, start_upstream
from bench.lib.loads import load_script
from bench.lib.measure import measure
from bench.lib.report import commit, write_report
from bench.lib.rounds import figure_lines, new_over_base
from bench.lib.wrk import run_wrk
from scenarios.pgcluster import PgAutoFailoverCluster

WARM_SECONDS = 2
FIGURES = ("rps", "p50_ms", "p99_ms", "cpu_ms")


async def start(
    stack: contextlib.AsyncExitStack, url: str, upstream: str, work: Path
) -> tuple[int, str, Path]:
    """Start a one-process gateway with its dispatcher on ``url``; return PID, URL, script."""
    await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
    key = await prepare(url)
    port = free_port()
    settings = gateway_settings(
        url, port, upstream, dispatcher=True, runners=16, work=work, workers=1
    )
    pid = await stack.enter_async_context(gateway(settings, port, work))
    base = f"http://127.0.0.1:{port}"
    return pid, base, await load_script("sync", base, key, url, work)


def one_run(side: tuple[int, str, Path], args: argparse.Namespace, prefix: str) -> Any:
    """Drive one gateway alone; return wrk's figures and its CPU per good answer."""
    pid, base, script = side
    run = measure(
        base, script, connections=args.connections, duration=args.duration, prefix=prefix, pid=pid
    )
    run["cpu_ms"] = run["gateway_cpu_ms_per_request"]
    return run


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the formation and both gateways, warm them, run alternated rounds."""
    async with contextlib.AsyncExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="replication-")))
        upstream = await start_upstream(stack, work)
        say("starting a two-node pg_auto_failover formation (primary + synchronous standby)")
        cluster = await stack.enter_async_context(PgAutoFailoverCluster(nodes=2))
        await cluster.create_database("bench")
        standby_names = await cluster.synchronous_standby_names()
        say(f"  synchronous_standby_names = {standby_names!r}")
        single_url = stack.enter_context(database("postgresql", work))
        sides = {
            "base": await start(stack, single_url, upstream, work / "single"),
            "new": await start(stack, cluster.multi_host_url_for("bench"), upstream, work / "sync"),
        }
        for _pid, base, script in sides.values():
            run_wrk(
                base, script, connections=args.connections, duration=WARM_SECONDS, prefix="warm"
            )
        rounds = []
        for n in range(args.rounds):
            order = ("base", "new") if n % 2 == 0 else ("new", "base")
            figures = {side: one_run(sides[side], args, f"r{n}{side}") for side in order}
            rounds.append(figures)
            say(
                f"round {n + 1}/{args.rounds}: "
                + "  ".join(
                    f"{'synchronous' if side == 'new' else 'single'} {f['rps']} jobs/s,"
                    f" p50 {f['p50_ms']} ms, p99 {f['p99_ms']} ms"
                    for side, f in sorted(figures.items())
                )
            )
    return {
        "commit": commit(),
        "connections": args.connections,
        "duration_s": args.duration,
        "synchronous_standby_names": standby_names,
        "rounds": rounds,  # "base": single node, "new": primary with a synchronous standby
        "ratios": new_over_base(rounds, FIGURES),
    }


def summary(report: dict[str, Any]) -> str:
    """One line per figure: both medians and the median ratio, synchronous over single."""
    lines = [
        f"{report['commit']}: sync jobs, synchronous standby over a single node,"
        f" {report['connections']} connection(s), {len(report['rounds'])} alternated rounds"
    ]
    return "\n".join(lines + figure_lines(report["ratios"], "single", "synchronous"))


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print the summary and write the JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.replication")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", default=str(ROOT / "reports/out/replication.json"))
    args = parser.parse_args(argv)
    report = asyncio.run(run(args))
    print(summary(report))
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
