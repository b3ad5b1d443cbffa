"""Sync jobs through PgBouncer in transaction mode, beside a direct connection, in one run.

``python -m bench.pooler [--connections 16] [--duration 6] [--rounds 4] [--server-pool 20]
[--warm 2]``
starts two gateways with the same zero-latency upstream, each on a fresh database of the
machine's PostgreSQL: one connected directly (``direct``), one through a PgBouncer of its
own in transaction mode (``scenarios.pgbouncer``, ``--server-pool`` server connections)
with ``[database] pooler = "transaction"`` and the direct URL as ``listen_url`` (the
set-up docs/operations.md describes). It drives one at a time with ``wrk`` (sync jobs:
``Prefer: wait``), alternating the order each round, and prints per figure (req/s, p50,
p99, the gateway's CPU per job) both medians and the median of the rounds' ratios,
pooled over direct; JSON to ``--out``. Needs ``pgbouncer`` (Debian) and ``wrk``. It is a
measurement, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
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
from scenarios.pgbouncer import pgbouncer_binary, start_pgbouncer

WARM_SECONDS = 2.0  # each gateway's load before the rounds (--warm)
FIGURES = ("rps", "p50_ms", "p99_ms", "cpu_ms")


async def start(
    stack: contextlib.AsyncExitStack,
    direct: str,
    upstream: str,
    work: Path,
    through: str | None = None,
) -> tuple[int, str, Path]:
    """Start a one-process gateway with its dispatcher on ``direct``'s database, or through
    the pooler at ``through`` (same database); return its PID, URL and wrk script."""
    await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
    key = await prepare(direct)  # migrations and the key: a direct connection's work
    port = free_port()
    path = gateway_settings(
        through or direct, port, upstream, dispatcher=True, runners=16, work=work, workers=1
    )
    if through is not None:
        settings = json.loads(path.read_text(encoding="utf-8"))
        settings["database"] = {"pooler": "transaction", "listen_url": direct}
        path.write_text(json.dumps(settings), encoding="utf-8")
    pid = await stack.enter_async_context(gateway(path, port, work))
    base = f"http://127.0.0.1:{port}"
    return pid, base, await load_script("sync", base, key, direct, work)


def one_run(side: tuple[int, str, Path], args: argparse.Namespace, prefix: str) -> Any:
    """Drive one gateway alone; return wrk's figures and its CPU per good answer."""
    pid, base, script = side
    run = measure(
        base, script, connections=args.connections, duration=args.duration, prefix=prefix, pid=pid
    )
    run["cpu_ms"] = run["gateway_cpu_ms_per_request"]
    return run


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start PgBouncer and both gateways, warm them, run alternated rounds."""
    binary = pgbouncer_binary()
    if binary is None:
        raise SystemExit("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    async with contextlib.AsyncExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pooler-")))
        upstream = await start_upstream(stack, work)
        direct_url = stack.enter_context(database("postgresql", work))
        pooled_url = stack.enter_context(database("postgresql", work))
        bouncer_dir = work / "pgbouncer"
        bouncer_dir.mkdir()
        bouncer = start_pgbouncer(binary, bouncer_dir, pooled_url, args.server_pool)
        stack.callback(bouncer.stop)
        say(
            f"PgBouncer (transaction mode, {args.server_pool} server connections) on {bouncer.port}"
        )
        sides = {
            "base": await start(stack, direct_url, upstream, work / "direct"),
            "new": await start(
                stack, pooled_url, upstream, work / "pooled", through=bouncer.url(pooled_url)
            ),
        }
        for _pid, base, script in sides.values():
            run_wrk(base, script, connections=args.connections, duration=args.warm, prefix="warm")
        rounds = []
        for n in range(args.rounds):
            order = ("base", "new") if n % 2 == 0 else ("new", "base")
            figures = {side: one_run(sides[side], args, f"r{n}{side}") for side in order}
            rounds.append(figures)
            say(
                f"round {n + 1}/{args.rounds}: "
                + "  ".join(
                    f"{'pgbouncer' if side == 'new' else 'direct'} {f['rps']} jobs/s,"
                    f" p50 {f['p50_ms']} ms, p99 {f['p99_ms']} ms"
                    for side, f in sorted(figures.items())
                )
            )
    return {
        "commit": commit(),
        "connections": args.connections,
        "duration_s": args.duration,
        "server_pool": args.server_pool,
        "warm_s": args.warm,
        "rounds": rounds,  # "base": direct, "new": through PgBouncer in transaction mode
        "ratios": new_over_base(rounds, FIGURES),
    }


def summary(report: dict[str, Any]) -> str:
    """One line per figure: both medians and the median ratio, PgBouncer over direct."""
    lines = [
        f"{report['commit']}: sync jobs, PgBouncer (transaction mode) over a direct connection,"
        f" {report['connections']} connection(s), {len(report['rounds'])} alternated rounds"
    ]
    return "\n".join(lines + figure_lines(report["ratios"], "direct", "pgbouncer"))


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print the summary and write the JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.pooler")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--server-pool", type=int, default=20, help="PgBouncer's server pool")
    parser.add_argument("--warm", type=float, default=WARM_SECONDS, help="seconds per gateway")
    parser.add_argument("--out", default=str(ROOT / "reports/out/pooler.json"))
    args = parser.parse_args(argv)
    report = asyncio.run(run(args))
    print(summary(report))
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
