"""Two versions of the gateway side by side, under the same load at the same time.

``python -m bench.duel --base REV [--mode create|replay|sync] [--connections 16]
[--duration 6] [--rounds 5] [--database postgresql|sqlite]`` exports commit ``REV`` into a
temporary directory (``git archive``), starts its gateway and this checkout's (working
tree included), each with one worker, its own database and the same zero-latency
upstream, and in every round drives both with ``wrk`` at once: whatever the shared host
does during a round, it does to both. It prints each round and, per figure (req/s,
p50, p99, the gateway's CPU per good answer and, on PostgreSQL, its database backends'),
the median of the rounds' ratios of this checkout over ``REV`` (an odd count of rounds:
the median is one round's ratio), and writes them as JSON (``--out``).

``--trace-new`` turns OpenTelemetry tracing on in this checkout's gateway only
(``ONEJOB_TELEMETRY=on``, every request's trace sampled, spans exported over OTLP/HTTP to
a loopback collector that keeps nothing, ``bench.lib.null_collector``): with
``--base HEAD`` it measures what tracing costs a job.

``bench.compare`` measures one version against pgbench and the upstream; this measures one
change. Run one after the other, two versions' figures on this host differed by more
than most changes move them (docs/benchmarks.md); run at once, the rounds' ratios of one
change agreed within a few percent. Both versions run in this checkout's virtualenv:
a ``REV`` whose dependencies differ needs them installed first. ``--base-python`` runs
``REV``'s side on another interpreter (a virtualenv built on it, with the same packages):
``--base HEAD --base-python X`` measures the interpreter alone. It is a measurement,
not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.lib.children import ROOT, say
from bench.lib.gateways import Side, start_side, start_upstream
from bench.lib.measure import backends_cpu_s, tree_cpu_s
from bench.lib.null_collector import null_collector
from bench.lib.report import commit, write_report
from bench.lib.rounds import figure_lines, new_over_base, odd_count
from bench.lib.wrk import run_wrk

#: ``db_cpu_ms``: PostgreSQL's backends of that side's database, per good answer.
FIGURES = ("rps", "p50_ms", "p99_ms", "cpu_ms", "db_cpu_ms")
WARM_SECONDS = 2


@contextlib.contextmanager
def exported(rev: str) -> Iterator[Path]:
    """Yield a directory holding commit ``rev`` of this repository."""
    with tempfile.TemporaryDirectory(prefix="onejob-duel-") as tmp:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        yield Path(tmp)


def one_round(sides: dict[str, Side], args: argparse.Namespace, n: int) -> Any:
    """Drive both gateways at once; return each one's wrk figures, its CPU per answer
    and its database backends' (PostgreSQL: a backend that exits mid-round is missed)."""
    out: dict[str, dict[str, Any]] = {}

    def drive(side: str) -> None:
        pid, base, script, url = sides[side]
        before, db_before = tree_cpu_s(pid), backends_cpu_s(url)
        run = run_wrk(
            base, script, connections=args.connections, duration=args.duration, prefix=f"d{n}"
        )
        ok = max(run["ok"], 1)
        run["cpu_ms"] = round((tree_cpu_s(pid) - before) * 1000 / ok, 3)
        db_after = backends_cpu_s(url)
        db_s = sum(cpu - db_before.get(backend, 0.0) for backend, cpu in db_after.items())
        run["db_cpu_ms"] = round(db_s * 1000 / ok, 3) if db_after else None
        out[side] = run

    threads = [threading.Thread(target=drive, args=(side,)) for side in sides]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start both sides, warm them, run the rounds; return the report."""
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="duel-")))
        upstream = await start_upstream(stack, work)
        roots = {"base": stack.enter_context(exported(args.base)), "new": ROOT}
        env: dict[str, dict[str, str]] = {}
        collected = None
        if args.trace_new:
            collected = stack.enter_context(null_collector())
            env["new"] = {
                "ONEJOB_TELEMETRY": "on",
                "OTEL_EXPORTER_OTLP_ENDPOINT": collected.url,
                "OTEL_SERVICE_NAME": "onejob-duel",
            }
        sides = {
            side: await start_side(stack, side, root, upstream, args, env.get(side))
            for side, root in roots.items()
        }
        for _pid, base, script, _url in sides.values():
            run_wrk(base, script, connections=16, duration=WARM_SECONDS, prefix="warm")
        rounds = []
        for n in range(args.rounds):
            figures = one_round(sides, args, n)
            rounds.append(figures)
            say(
                f"round {n + 1}/{args.rounds}: "
                + "  ".join(
                    f"{side} {f['rps']} req/s, p50 {f['p50_ms']} ms, CPU {f['cpu_ms']} ms"
                    + (f" (database {f['db_cpu_ms']} ms)" if f["db_cpu_ms"] is not None else "")
                    for side, f in figures.items()
                )
            )
        spans = None if collected is None else {"posts": collected.posts, "bytes": collected.bytes}
    return {
        "trace_new": args.trace_new,
        "exported": spans,
        "base": args.base,
        "base_python": args.base_python or sys.executable,
        "new": commit(),
        "new_python": sys.executable,
        "mode": args.mode,
        "database": args.database,
        "connections": args.connections,
        "duration_s": args.duration,
        "rounds": rounds,
        "ratios": new_over_base(rounds, FIGURES),
    }


def summary(report: dict[str, Any]) -> str:
    """One line per figure: both medians and the median ratio, new over base."""
    lines = [
        f"{report['new']} over {report['base']}: {report['mode']}, {report['database']},"
        f" {report['connections']} connection(s), {len(report['rounds'])} rounds"
    ]
    if report.get("exported"):
        sent = report["exported"]
        lines.append(
            f"tracing on in new: {sent['posts']} OTLP exports, {sent['bytes']} bytes in all"
        )
    return "\n".join(lines + figure_lines(report["ratios"], "base", "new"))


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print the summary and write the JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.duel")
    parser.add_argument("--base", required=True, help="the commit to measure against")
    parser.add_argument("--mode", choices=("create", "replay", "sync"), default="create")
    parser.add_argument("--database", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per round")
    parser.add_argument("--rounds", type=odd_count, default=5)
    parser.add_argument(
        "--base-python",
        help="run REV's gateway on this Python (a virtualenv's, with the same packages), "
        "to measure an interpreter: --base HEAD --base-python /path/to/venv/bin/python",
    )
    parser.add_argument(
        "--trace-new",
        action="store_true",
        help="turn tracing on in this checkout's gateway, exporting to a loopback collector",
    )
    parser.add_argument("--out", default=str(ROOT / "reports/out/duel.json"))
    args = parser.parse_args(argv)
    report = asyncio.run(run(args))
    print(summary(report))
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
