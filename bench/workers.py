"""Two worker counts of this checkout's gateway, in alternated rounds under the same load.

``python -m bench.workers [--counts 2,1] [--mode create|replay|sync]
[--connections 16] [--duration 6] [--rounds 6] [--database postgresql|sqlite]`` starts
one gateway per count (``--workers``), each on a database of its own, with the same
zero-latency upstream, and drives one at a time with ``wrk``, in an order that
alternates (``a b``, then ``b a``, ...). It prints each run and, per figure (req/s, p50,
p99, the gateway's CPU per good answer, the whole host's, and on PostgreSQL its database
backends'), both medians and the median of the rounds' ratios, second count over first,
and writes them as JSON (``--out``).

``bench.duel`` runs two versions at once, which suits one-process sides: here each side would
take what CPU the other left, and a side of two processes would take more of it. So
the sides take turns, and a round's pair is seconds apart. What the default worker
count is (``gateway.settings.default_workers``) was decided with this. It is a
measurement, not a test.
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
from bench.lib.measure import backends_cpu_s, measure
from bench.lib.report import commit, write_report
from bench.lib.rounds import figure_lines, new_over_base
from bench.lib.wrk import run_wrk

WARM_SECONDS = 2
#: Per figure, as ``bench.duel``'s (``new_over_base`` reads these), plus the host's CPU per answer.
FIGURES = ("rps", "p50_ms", "p99_ms", "cpu_ms", "host_cpu_ms", "db_cpu_ms")


async def start(
    stack: contextlib.AsyncExitStack, workers: int, upstream: str, args: argparse.Namespace
) -> tuple[int, str, Path, str]:
    """Start a gateway of ``workers`` processes on a database of its own; return its
    PID, base URL, load script and database URL."""
    work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"workers-{workers}-")))
    url = stack.enter_context(database(args.database, work))
    key = await prepare(url)
    port = free_port()
    settings = gateway_settings(
        url, port, upstream, dispatcher=args.mode == "sync", runners=16, work=work, workers=workers
    )
    pid = await stack.enter_async_context(gateway(settings, port, work))
    base = f"http://127.0.0.1:{port}"
    return pid, base, await load_script(args.mode, base, key, url, work), url


def one_run(side: tuple[int, str, Path, str], args: argparse.Namespace, prefix: str) -> Any:
    """Drive one gateway alone; return wrk's figures and the CPU per good answer."""
    pid, base, script, url = side
    db_before = backends_cpu_s(url)
    run = measure(
        base, script, connections=args.connections, duration=args.duration, prefix=prefix, pid=pid
    )
    ok = max(run["ok"], 1)
    db_after = backends_cpu_s(url)
    db_s = sum(cpu - db_before.get(backend, 0.0) for backend, cpu in db_after.items())
    run["cpu_ms"] = run["gateway_cpu_ms_per_request"]
    run["host_cpu_ms"] = run["host_cpu_ms_per_request"]
    run["db_cpu_ms"] = round(db_s * 1000 / ok, 3) if db_after else None
    return run


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start both gateways, warm them, run the alternated rounds; return the report."""
    first, second = args.counts
    async with contextlib.AsyncExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="workers-")))
        upstream = await start_upstream(stack, work)
        sides = {
            "base": await start(stack, first, upstream, args),
            "new": await start(stack, second, upstream, args),
        }
        for _pid, base, script, _url in sides.values():
            run_wrk(base, script, connections=16, duration=WARM_SECONDS, prefix="warm")
        rounds = []
        for n in range(args.rounds):
            order = ("base", "new") if n % 2 == 0 else ("new", "base")
            figures = {side: one_run(sides[side], args, f"w{n}{side}") for side in order}
            rounds.append(figures)
            say(
                f"round {n + 1}/{args.rounds}: "
                + "  ".join(
                    f"{args.counts[side == 'new']} worker(s) {f['rps']} req/s, p50"
                    f" {f['p50_ms']} ms, CPU {f['cpu_ms']} ms (host {f['host_cpu_ms']})"
                    for side, f in sorted(figures.items())
                )
            )
    return {
        "commit": commit(),
        "workers": {"first": first, "second": second},
        "mode": args.mode,
        "database": args.database,
        "connections": args.connections,
        "duration_s": args.duration,
        "rounds": rounds,  # "base": the first count's run, "new": the second's
        "ratios": new_over_base(rounds, FIGURES),
    }


def summary(report: dict[str, Any]) -> str:
    """One line per figure: both medians and the median ratio, second count over first."""
    first, second = report["workers"]["first"], report["workers"]["second"]
    lines = [
        f"{report['commit']}: {second} worker(s) over {first}, {report['mode']},"
        f" {report['database']}, {report['connections']} connection(s),"
        f" {len(report['rounds'])} alternated rounds"
    ]
    return "\n".join(lines + figure_lines(report["ratios"], str(first), str(second)))


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print the summary and write the JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.workers")
    parser.add_argument("--counts", default="2,1", help="the two worker counts, first,second")
    parser.add_argument("--mode", choices=("create", "replay", "sync"), default="create")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--database", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--out", default=str(ROOT / "reports/out/workers.json"))
    args = parser.parse_args(argv)
    try:
        args.counts = tuple(int(c) for c in args.counts.split(","))
    except ValueError:
        parser.error("--counts takes two numbers, e.g. 2,1")
    if len(args.counts) != 2 or min(args.counts) < 1:
        parser.error("--counts takes two numbers of at least 1, e.g. 2,1")
    report = asyncio.run(run(args))
    print(summary(report))
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
