"""The hot paths at 0, 1 M and 10 M jobs, and retention of 1 M jobs under live traffic.

``python -m bench.volume [--sizes 0,1000000,10000000] [--calls 200] [--prune 1000000]
[--connections 4] [--window 20] [--port 5434] [--database-url URL] [--keep]
[--prune-only]``

creates a PostgreSQL cluster of its own (``pg_createcluster 15 volume``, autovacuum on;
the shared one on 5432 is left alone) after checking the disk has room, migrates a
database there with onejob's migrations and fills it in SQL (``bench/lib/volume_fill.py``:
jobs with their attempts and events, spread over ten days, some owners large, many small).
At each size it times every hot path through the store, one call after another
(``bench/lib/hot_paths.py``: creation, replay, claim, decision, reads, the owner's and the
all-owners listings, the reaper's and the reconciler's scans; p50 and p99 over
``--calls``), and records the plan PostgreSQL caches for each statement they send. Then
it starts a gateway on that database with the zero-latency upstream, drives sync jobs with
``wrk`` at ``--connections`` in windows of ``--window`` seconds, and runs ``onejob jobs
prune`` on the oldest ``--prune`` jobs meanwhile: live p99 before, during and after.
The cluster is dropped at the end unless ``--keep``; ``--database-url`` (a libpq admin
URL) uses a server that exists instead, and with ``--prune-only`` prunes the next
``--prune`` jobs of the database a ``--keep`` left, under load, and nothing else. JSON to
``--out``. Kept out of CI: a measurement (docs/benchmarks.md, at volume).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg

from bench.lib import volume_fill
from bench.lib.children import ROOT, free_port, say
from bench.lib.databases import libpq, prepare
from bench.lib.gateways import gateway, gateway_settings, start_upstream
from bench.lib.hot_paths import PATHS, Traffic, plans, record_statements, time_paths
from bench.lib.loads import load_script
from bench.lib.measure import measure
from bench.lib.report import commit, write_report
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import open_store, upgrade_database

DATABASE = "volume"
WARM_CALLS = 5  # per path, before each size's timed calls
BIG_OWNER = "big-0"  # one of the three owners holding 60 % of the jobs
SMALL_OWNER = "small-42"  # one of the 9,973 holding 10 %


def asyncpg_url(url: str) -> str:
    """The SQLAlchemy URL of a libpq one."""
    return url.replace("postgresql://", "postgresql+asyncpg://", 1)


def load() -> list[float]:
    """The host's load averages (1, 5, 15 minutes): other engineers share its 2 cores."""
    return [round(x, 2) for x in os.getloadavg()]


async def at_size(url: str, calls: int) -> dict[str, Any]:
    """Time every hot path and plan every statement they send on the database as it is."""
    store = await open_store(url, shortcuts=ShortcutsConfig(), database=DatabaseConfig())
    try:
        await time_paths(store, Traffic(BIG_OWNER, SMALL_OWNER), WARM_CALLS)
        timed = await time_paths(store, Traffic(BIG_OWNER, SMALL_OWNER), calls)
    finally:
        await store.close()
    # Every statement goes through SQLAlchemy with the shortcuts off, where it is recorded.
    plain = await open_store(url, shortcuts=ShortcutsConfig.all_off(), database=DatabaseConfig())
    try:
        statements = await record_statements(plain, Traffic(BIG_OWNER, SMALL_OWNER))
    finally:
        await plain.close()
    conn = await asyncpg.connect(libpq(url))
    try:
        planned = await plans(conn, statements)
    finally:
        await conn.close()
    return {"paths": timed, "plans": planned}


def same_plans(sizes: list[dict[str, Any]]) -> dict[str, Any]:
    """For each statement, whether its plan read the same tables the same way at every size."""
    out: dict[str, Any] = {}
    for sql in sizes[0]["plans"]:
        seen = [s["plans"][sql]["scans"] for s in sizes if sql in s["plans"]]
        out[sql] = {
            "path": sizes[0]["plans"][sql]["path"],
            "same": all(s == seen[0] for s in seen),
            "scans": seen,
        }
    return out


def table_stats(url: str) -> dict[str, Any]:
    """Live and dead rows, and vacuums so far, of the hot tables."""
    rows = volume_fill.psql(
        libpq(url),
        "SELECT relname, n_live_tup, n_dead_tup, autovacuum_count, autoanalyze_count"
        " FROM pg_stat_user_tables WHERE relname IN ('jobs', 'attempts', 'job_events')",
    )
    return {
        r.split("|")[0]: dict(
            zip(
                ("live", "dead", "autovacuums", "autoanalyzes"),
                map(int, r.split("|")[1:]),
                strict=True,
            )
        )
        for r in rows.splitlines()
    }


def wal_lsn(url: str) -> str:
    return volume_fill.psql(libpq(url), "SELECT pg_current_wal_lsn()")


@contextlib.contextmanager
def pruning(url: str, older_than: str, log: Path) -> Iterator[dict[str, Any]]:
    """Run ``onejob jobs prune`` for the block; the yielded dict gets its ``seconds``,
    ``pruned`` and return code once it ends."""
    # ``onejob`` of this checkout (``ROOT``, which may be an exported commit), not the
    # one the virtualenv's script would import.
    onejob = [sys.executable, "-c", "import sys; from cli.main import main; sys.exit(main())"]
    cmd = [*onejob, "jobs", "prune", "--older-than", older_than, "--database-url", url]
    out: dict[str, Any] = {"older_than": older_than}
    with open(log, "wb") as err:
        began = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, cwd=ROOT)

        def wait() -> None:
            stdout, _ = proc.communicate()
            out["seconds"] = round(time.monotonic() - began, 1)
            out["returncode"] = proc.returncode
            out["pruned"] = int(stdout.split()[-1]) if stdout.split() else None

        waiter = threading.Thread(target=wait)
        waiter.start()
        out["running"] = waiter.is_alive
        try:
            yield out
        finally:
            if proc.poll() is None:
                proc.terminate()
            waiter.join()


def older_than_for(url: str, prune: int) -> str:
    """The window (whole hours, rounded down) past which ``onejob jobs prune`` finds at
    least the oldest ``prune`` jobs of the database."""
    at = volume_fill.psql(
        libpq(url),
        f"SELECT extract(epoch FROM now()::timestamp - created_at) FROM jobs ORDER BY id"
        f" OFFSET {prune} LIMIT 1",
    )
    return f"{int(float(at) // 3600)}h"


async def prune_under_load(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Drive sync jobs through a gateway, without prune, with it, and without it again."""
    async with contextlib.AsyncExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="volume-")))
        upstream = await start_upstream(stack, work)
        key = await prepare(url)
        port = free_port()
        settings = gateway_settings(
            url, port, upstream, dispatcher=True, runners=16, work=work, workers=1
        )
        pid = await stack.enter_async_context(gateway(settings, port, work))
        base = f"http://127.0.0.1:{port}"
        script = await load_script("sync", base, key, url, work)

        def window(prefix: str) -> dict[str, Any]:
            run = measure(
                base,
                script,
                connections=args.connections,
                duration=args.window,
                prefix=prefix,
                pid=pid,
            )
            run["load"] = load()
            say(f"  {prefix}: {run['rps']} jobs/s, p50 {run['p50_ms']} ms, p99 {run['p99_ms']} ms")
            return run

        window("warm")
        before = [window(f"before{n}") for n in range(2)]
        stats_before, lsn_before = table_stats(url), wal_lsn(url)
        older_than = older_than_for(url, args.prune)
        say(f"pruning jobs older than {older_than} under load")
        during: list[dict[str, Any]] = []
        with pruning(url, older_than, work / "prune.log") as prune:
            while prune["running"]():
                during.append(window(f"during{len(during)}"))
        prune.pop("running")
        wal = volume_fill.psql(libpq(url), f"SELECT pg_current_wal_lsn() - '{lsn_before}'::pg_lsn")
        stats_after = table_stats(url)
        after = [window(f"after{n}") for n in range(2)]
        say(f"pruned {prune.get('pruned')} jobs in {prune.get('seconds')} s")
    calm = sorted(r["p99_ms"] for r in before + after)
    return {
        "connections": args.connections,
        "window_s": args.window,
        "prune": {**prune, "wal_bytes": int(float(wal))},
        "before": before,
        "during": during,
        "after": after,
        "p99_without_ms": calm[len(calm) // 2],
        "p99_during_worst_ms": max((r["p99_ms"] for r in during), default=None),
        "table_stats": {"before": stats_before, "after": stats_after},
    }


async def run(args: argparse.Namespace, admin: str) -> dict[str, Any]:
    """Migrate, then fill and measure each size in turn; prune under load at the end."""
    if args.prune_only:
        url = asyncpg_url(admin.rsplit("/", 1)[0] + f"/{DATABASE}")
        return {"commit": commit(), "retention": await prune_under_load(url, args)}
    volume_fill.psql(admin, f"DROP DATABASE IF EXISTS {DATABASE}")
    volume_fill.psql(admin, f"CREATE DATABASE {DATABASE}")
    url = asyncpg_url(admin.rsplit("/", 1)[0] + f"/{DATABASE}")
    await upgrade_database(url)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    total = sizes[-1]
    ends = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    report: dict[str, Any] = {"commit": commit(), "calls": args.calls, "sizes": []}
    filled = 0
    for size in sizes:
        if size > filled:
            say(f"filling to {size:,} jobs")
            # Newest first: the first size holds the newest jobs, the next adds older ones.
            fill = await asyncio.to_thread(
                volume_fill.fill, libpq(url), total - size + 1, total - filled, total, ends
            )
            filled = size
        else:
            fill = None
        say(f"at {size:,} jobs: timing {len(PATHS)} paths, {args.calls} calls each")
        began_load = load()
        measured = await at_size(url, args.calls)
        report["sizes"].append(
            {
                "jobs": size,
                "fill": fill,
                "bytes": volume_fill.sizes(libpq(url)),
                "load": [began_load, load()],
                **measured,
            }
        )
        for name, figures in measured["paths"].items():
            say(f"  {name}: p50 {figures['p50_ms']} ms, p99 {figures['p99_ms']} ms")
        write_report(args.out, report)  # so far: a run stopped later keeps its sizes
    report["plans"] = same_plans(report["sizes"])
    differ = [p["path"] for p in report["plans"].values() if not p["same"]]
    say(f"plans that differ between sizes: {differ or 'none'}")
    if args.prune:
        report["retention"] = await prune_under_load(url, args)
    return report


def summary(report: dict[str, Any]) -> str:
    """The table: each path's p50 / p99 at each size; then retention under load."""
    lines = [f"{report['commit']}"]
    if "sizes" in report:
        lines += sized(report)
    if "retention" in report:
        r = report["retention"]
        lines.append(
            f"prune of {r['prune'].get('pruned')} jobs in {r['prune'].get('seconds')} s under"
            f" {r['connections']} connections of sync jobs: live p99 {r['p99_without_ms']} ms"
            f" without, worst window {r['p99_during_worst_ms']} ms during"
        )
    return "\n".join(lines)


def sized(report: dict[str, Any]) -> list[str]:
    """Each path's p50 / p99 at each size, and the paths whose plans differ."""
    sizes = [s["jobs"] for s in report["sizes"]]
    lines = [f"hot paths, p50 / p99 ms over {report['calls']} calls"]
    lines.append("path".ljust(24) + "".join(f"{n:>22,}" for n in sizes))
    for name in PATHS:
        cells = [s["paths"][name] for s in report["sizes"]]
        lines.append(
            name.ljust(24) + "".join(f"{c['p50_ms']:>12} / {c['p99_ms']:<7}" for c in cells)
        )
    differ = sorted({p["path"] for p in report["plans"].values() if not p["same"]})
    lines.append(f"plans differing between sizes: {', '.join(differ) or 'none'}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, check the disk, run on a cluster of its own, print and write."""
    parser = argparse.ArgumentParser(prog="python -m bench.volume")
    parser.add_argument("--sizes", default="0,1000000,10000000", help="jobs, comma-separated")
    parser.add_argument("--calls", type=int, default=200, help="timed calls per path and size")
    parser.add_argument("--prune", type=int, default=1_000_000, help="jobs pruned under load")
    parser.add_argument("--connections", type=int, default=4, help="live traffic's connections")
    parser.add_argument("--window", type=float, default=20.0, help="seconds per wrk run")
    parser.add_argument("--port", type=int, default=5434, help="the own cluster's port")
    parser.add_argument("--cluster", default="volume", help="the own cluster's name")
    parser.add_argument("--database-url", help="a libpq admin URL of a server to use instead")
    parser.add_argument("--keep", action="store_true", help="keep the cluster at the end")
    parser.add_argument(
        "--prune-only",
        action="store_true",
        help="with --database-url: only the prune under load, on the database a --keep left",
    )
    parser.add_argument("--out", default=str(ROOT / "reports/out/volume.json"))
    args = parser.parse_args(argv)
    # Stopped (SIGTERM), it still drops its cluster: the blocks below unwind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    total = max(int(s) for s in args.sizes.split(","))
    disk = volume_fill.check_disk("/var/lib/postgresql", total)
    free, needed = disk["free_bytes"] / 2**30, disk["needed_bytes"] / 2**30
    say(f"disk: {free:.1f} GiB free, {needed:.1f} GiB needed")
    with contextlib.ExitStack() as stack:
        admin = args.database_url or stack.enter_context(
            volume_fill.own_cluster(args.cluster, args.port, args.keep)
        )
        report = asyncio.run(run(args, admin))
        if args.database_url and not (args.keep or args.prune_only):
            volume_fill.psql(admin, f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
    report["disk"] = disk
    print(summary(report))
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
