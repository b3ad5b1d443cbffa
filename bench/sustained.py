"""Minutes of sustained sync jobs on a PostgreSQL cluster of its own: the tail per window.

``python -m bench.sustained [--minutes 5] [--window 30] [--connections 16]
[--config defaults|sized] [--set NAME=VALUE] [--port 5433] [--keep] [--out PATH]``
(root: it runs ``pg_createcluster``) creates the cluster ``15 tail`` on ``--port``, configured with
PostgreSQL's defaults or as docs/operations.md sizes it ("Sizing PostgreSQL for onejob",
``SIZED`` here), starts one gateway (one process, its dispatcher on, the zero-latency
upstream) on a database of it, and drives sync jobs (``POST /v1/jobs`` with ``Prefer:
wait``) with wrk in back-to-back windows of ``--window`` seconds. Each window prints
and records wrk's p50 and p99, jobs/s, the checkpoints PostgreSQL started and finished
in it (``pg_stat_bgwriter``; the server's ``checkpoint complete`` log lines), the
gateway's CPU per job, and the host's load average. The goal of issue 46: p99 at most
3x p50 in every window. The cluster is dropped at the end unless ``--keep``. It is a
measurement, not a test; JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.lib.children import ROOT, free_port, say
from bench.lib.databases import prepare
from bench.lib.gateways import gateway, gateway_settings, start_upstream
from bench.lib.loads import load_script
from bench.lib.measure import measure
from bench.lib.report import commit, interpreter, write_report

VERSION = "15"
CLUSTER = "tail"
GOAL = 3.0  # p99 at most this many times p50, in every window
WARM_SECONDS = 5  # load before the first window (connections opened, statements prepared)
#: docs/operations.md, "Sizing PostgreSQL for onejob": what ``--config sized`` sets.
SIZED = {
    "shared_buffers": "2GB",
    "max_wal_size": "16GB",
    "min_wal_size": "2GB",
    "checkpoint_timeout": "15min",
    "checkpoint_completion_target": "0.9",
    "wal_compression": "lz4",
    "wal_buffers": "64MB",
    "max_connections": "100",
}
#: Set in both runs: what the benchmark reads, not what it measures.
ALWAYS = {"log_checkpoints": "on", "log_line_prefix": "'%m [%p] '"}
CHECKPOINT_LINE = re.compile(r"^(\S+ \S+) \S+ \[\d+\] LOG:\s+checkpoint (starting|complete): (.*)$")


def pg(*args: str, check: bool = True) -> str:
    """Run a Debian postgresql-common command; return its output."""
    out = subprocess.run(list(args), capture_output=True, text=True, check=False)
    if check and out.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: {out.stderr.strip() or out.stdout.strip()}")
    return out.stdout


def psql(port: int, sql: str, database: str = "postgres") -> str:
    """Run ``sql`` as postgres on the cluster; return its unaligned output."""
    return pg(
        "psql", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d", database,
        "-XAtqc", sql,
    ).strip()  # fmt: skip


@contextlib.contextmanager
def cluster(port: int, config: dict[str, str], *, keep: bool) -> Iterator[Path]:
    """Create, configure and start the cluster; yield its log file; drop it afterwards."""
    if CLUSTER in pg("pg_lsclusters", "-h", check=False).split():
        raise SystemExit(f"cluster {VERSION} {CLUSTER} exists: pg_dropcluster --stop 15 {CLUSTER}")
    pg(
        "pg_createcluster", VERSION, CLUSTER, "--port", str(port),
        "--", "--auth-local=trust", "--auth-host=trust",
    )  # fmt: skip
    try:
        conf = Path(f"/etc/postgresql/{VERSION}/{CLUSTER}/conf.d/onejob-bench.conf")
        lines = [f"{name} = {value}" for name, value in {**config, **ALWAYS}.items()]
        conf.write_text("\n".join(lines) + "\n", encoding="utf-8")
        pg("pg_ctlcluster", "--skip-systemctl-redirect", VERSION, CLUSTER, "start")
        say(f"cluster {VERSION}/{CLUSTER} on {port}: {', '.join(lines) or 'defaults'}")
        yield Path(f"/var/log/postgresql/postgresql-{VERSION}-{CLUSTER}.log")
    finally:
        if keep:
            say(f"kept: pg_dropcluster --stop {VERSION} {CLUSTER}")
        else:
            pg("pg_dropcluster", "--stop", VERSION, CLUSTER, check=False)


def checkpoints(port: int) -> dict[str, float]:
    """Return ``pg_stat_bgwriter``'s checkpoint counters now."""
    row = psql(
        port,
        "SELECT checkpoints_timed, checkpoints_req, checkpoint_write_time,"
        " checkpoint_sync_time, buffers_checkpoint, buffers_backend, buffers_clean"
        " FROM pg_stat_bgwriter",
    )
    names = ("timed", "requested", "write_ms", "sync_ms", "buffers", "backend", "bgwriter")
    counters = dict(zip(names, (float(v) for v in row.split("|")), strict=True))
    # Sessions opened on the gateway's database: a pool that opens and closes overflow
    # connections under load forks a backend for each.
    counters["sessions"] = float(
        psql(port, "SELECT sessions FROM pg_stat_database WHERE datname = 'onejob'")
    )
    return counters


def logged_checkpoints(log: Path, offset: int) -> tuple[list[dict[str, str]], int]:
    """Return the checkpoint lines the server logged past ``offset``, and the new offset."""
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            f.seek(offset)
            text = f.read()
            end = f.tell()
    except OSError:
        return [], offset
    found = []
    for line in text.splitlines():
        if m := CHECKPOINT_LINE.match(line):
            found.append({"at": m.group(1), "what": m.group(2), "detail": m.group(3)[:300]})
    return found, end


def load() -> str:
    """Return the host's load averages (1, 5, 15 minutes)."""
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the cluster, the gateway and the windows; return the report."""
    config = dict(SIZED) if args.config == "sized" else {}
    config.update(dict(setting.split("=", 1) for setting in args.set))
    windows: list[dict[str, Any]] = []
    started_load = load()
    with cluster(args.port, config, keep=args.keep) as log:
        psql(args.port, "CREATE DATABASE onejob")
        url = f"postgresql+asyncpg://postgres@127.0.0.1:{args.port}/onejob"
        settings = {name: psql(args.port, f"SHOW {name}") for name in SIZED}
        async with contextlib.AsyncExitStack() as stack:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sustained-")))
            upstream = await start_upstream(stack, work)
            key = await prepare(url)
            port = free_port()
            path = gateway_settings(
                url, port, upstream, dispatcher=True, runners=16, work=work, workers=1
            )
            pid = await stack.enter_async_context(gateway(path, port, work))
            base = f"http://127.0.0.1:{port}"
            script = await load_script("sync", base, key, url, work)
            measure(base, script, connections=args.connections, duration=WARM_SECONDS,
                    prefix="warm", pid=pid)  # fmt: skip
            offset = log.stat().st_size if log.exists() else 0
            count = max(1, round(args.minutes * 60 / args.window))
            began = time.monotonic()
            for n in range(count):
                before = checkpoints(args.port)
                start = time.monotonic() - began
                r = measure(base, script, connections=args.connections, duration=args.window,
                            prefix=f"w{n}", pid=pid)  # fmt: skip
                after = checkpoints(args.port)
                logged, offset = logged_checkpoints(log, offset)
                window = {
                    "window": n + 1,
                    "from_s": round(start),
                    "jobs_per_s": r["rps"],
                    "p50_ms": r["p50_ms"],
                    "p99_ms": r["p99_ms"],
                    "p99_over_p50": round(r["p99_ms"] / max(r["p50_ms"], 0.001), 2),
                    "bad": r["bad"] + r["socket_errors"],
                    "gateway_cpu_ms_per_job": r["gateway_cpu_ms_per_request"],
                    "checkpoints": {k: after[k] - before[k] for k in after},
                    "checkpoint_log": logged,
                    "load": load(),
                }
                windows.append(window)
                say(
                    f"window {n + 1}/{count} ({window['from_s']} s): {r['rps']} jobs/s,"
                    f" p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms"
                    f" ({window['p99_over_p50']}x), checkpoints started"
                    f" {sum(1 for c in logged if c['what'] == 'starting')}"
                    f" complete {sum(1 for c in logged if c['what'] == 'complete')},"
                    f" sessions opened {window['checkpoints']['sessions']:g},"
                    f" load {window['load']}"
                )
            database_size = psql(args.port, "SELECT pg_size_pretty(pg_database_size('onejob'))")
            wal = psql(args.port, "SELECT pg_size_pretty(pg_current_wal_lsn() - '0/0')")
    return {
        "commit": commit(),
        **interpreter(),
        "config": args.config + "".join(f", {setting}" for setting in args.set),
        "settings": settings,
        "connections": args.connections,
        "window_s": args.window,
        "minutes": args.minutes,
        "load_at_start": started_load,
        "load_at_end": load(),
        "database_size": database_size,
        "wal_written": wal,
        "windows": windows,
        "goal_met": all(w["p99_over_p50"] <= GOAL and not w["bad"] for w in windows),
    }


def summary(report: dict[str, Any]) -> str:
    """A table of the windows and whether the goal held in each."""
    lines = [
        f"{report['commit']}: sync jobs at {report['connections']} connections,"
        f" {report['minutes']} min on PostgreSQL ({report['config']}), load"
        f" {report['load_at_start']} -> {report['load_at_end']}; {report['wal_written']} of"
        f" WAL, database {report['database_size']}",
        "window  from  jobs/s  p50 ms  p99 ms  p99/p50  sessions  checkpoints (log)  load",
    ]
    for w in report["windows"]:
        logged = ", ".join(f"{c['what']} {c['at'][11:19]}" for c in w["checkpoint_log"]) or "-"
        lines.append(
            f"{w['window']:>6}  {w['from_s']:>4}  {w['jobs_per_s']:>6}  {w['p50_ms']:>6}"
            f"  {w['p99_ms']:>6}  {w['p99_over_p50']:>6}x  {w['checkpoints']['sessions']:>8g}"
            f"  {logged}  {w['load']}"
        )
    verdict = "met" if report["goal_met"] else "NOT met"
    lines.append(f"p99 <= {GOAL:g}x p50 in every window: {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print the summary and write the JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.sustained")
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--window", type=float, default=30.0, help="seconds per window")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--config", choices=("defaults", "sized"), default="sized")
    parser.add_argument("--port", type=int, default=5433, help="the cluster's port")
    parser.add_argument("--keep", action="store_true", help="keep the cluster afterwards")
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="one more setting"
    )
    parser.add_argument("--out", help="JSON report (default: reports/out/sustained-CONFIG.json)")
    args = parser.parse_args(argv)
    report = asyncio.run(run(args))
    print(summary(report))
    write_report(args.out or ROOT / f"reports/out/sustained-{args.config}.json", report)
    return 0 if report["goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
