"""Side-by-side benchmark of onejob against its own database and the direct upstream.

``python -m scenarios.load.compare [--databases postgresql,sqlite] [--duration 10]`` runs,
in one invocation, on this machine:

1. pgbench with onejob's own creation SQL (PostgreSQL), 8 and 16 clients;
2. the zero-latency upstream alone (``scenarios.load.upstream``), at 16 and 1 connection;
3. per database: ``onejob serve`` with the dispatcher off for creation and replay
   (16 connections), then with the dispatcher on for durable sync jobs
   (``POST /v1/jobs`` + ``Prefer: wait=30``) at 16 and at 1 connection;

all driven by ``wrk``. It prints every figure with the goals of issue 9 beside them
(P1 creation >= 0.5x pgbench, replay >= creation; P2 sync >= 300 jobs/s on PostgreSQL,
>= 150 on SQLite; P3 p50 overhead above the upstream <= 3 ms PostgreSQL, <= 5 ms SQLite),
and writes ``reports/out/compare.json``. Answers that are not what the run expects
(anything but 201/200, a sync job not ``succeeded``) are counted and reported, never as
throughput. It is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from gateway.settings import Settings
from scenarios.load import wrk_scripts
from scenarios.load.bench import child, free_port, ready

ROOT = Path(__file__).resolve().parents[2]
PG_ADMIN = os.environ.get("ONEJOB_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
CONTRACT = "ticket-triage@1"
REPLAY_KEYS = 100
WRK_THREADS = 2
#: Goals of issue 9 (ratios and floors), printed beside the figures.
GOALS = {
    "P1_creation_vs_pgbench": 0.5,
    "P2_sync_jobs_per_s": {"postgresql": 300.0, "sqlite": 150.0},
    "P3_overhead_p50_ms": {"postgresql": 3.0, "sqlite": 5.0},
}
INPUT = {
    "ticket_id": "SUP-42",
    "channel": "email",
    "customer": {"name": "Priya", "plan": "pro"},
    "subject": "Charged twice",
    "body": "My card was charged twice for March.",
}


def say(message: str) -> None:
    """Print progress on stderr."""
    print(message, file=sys.stderr, flush=True)


def run_wrk(
    url: str, script: Path, *, connections: int, duration: float, prefix: str
) -> dict[str, Any]:
    """Run wrk and return its ``WRK_RESULT`` line as a dict (with ``rps``)."""
    prefix = f"{prefix}-{secrets.token_hex(3)}"  # every run makes new jobs
    threads = min(WRK_THREADS, connections)
    cmd = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{int(duration)}s",
        "--timeout",
        "40s",
        "-s",
        str(script),
        url,
        "--",
        prefix,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 120, check=False)
    match = re.search(r"^WRK_RESULT (\{.*\})$", out.stdout, re.MULTILINE)
    if match is None:
        raise SystemExit(f"wrk gave no result:\n{out.stdout}\n{out.stderr}")
    result: dict[str, Any] = json.loads(match.group(1))
    seconds = result["duration_us"] / 1e6
    result["rps"] = round(result["ok"] / seconds, 1)
    result["p50_ms"] = round(result["p50_us"] / 1000, 3)
    result["p99_ms"] = round(result["p99_us"] / 1000, 3)
    if out.stderr.strip():
        say(out.stderr.strip()[:600])
    return result


def rss_kib(pid: int) -> int:
    """Return a process's resident set size in KiB (0 when gone)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def tree_rss_kib(pid: int) -> int:
    """Return the RSS of a process and its children (``--workers``)."""
    total = rss_kib(pid)
    with contextlib.suppress(OSError):
        for child_pid in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            total += tree_rss_kib(int(child_pid))
    return total


# -- databases ---------------------------------------------------------------------------------


@contextlib.contextmanager
def database(kind: str, work: Path) -> Iterator[str]:
    """Yield the SQLAlchemy URL of a fresh database of ``kind``; drop it afterwards."""
    if kind == "sqlite":
        yield f"sqlite+aiosqlite:///{work / f'bench-{secrets.token_hex(4)}.db'}"
        return
    name = f"onejob_bench_{secrets.token_hex(4)}"
    subprocess.run(["psql", PG_ADMIN, "-qc", f"CREATE DATABASE {name}"], check=True)
    try:
        base = PG_ADMIN.rsplit("/", 1)[0]
        yield f"{base.replace('postgresql://', 'postgresql+asyncpg://', 1)}/{name}"
    finally:
        subprocess.run(
            ["psql", PG_ADMIN, "-qc", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"], check=False
        )


def libpq(url: str) -> str:
    """Turn a SQLAlchemy asyncpg URL into a libpq one."""
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def prepare(url: str) -> str:
    """Migrate and create an API key; return the key."""
    from gateway.store import open_store, upgrade_database

    await upgrade_database(url)
    store = await open_store(url)
    try:
        _, key = await store.create_api_key("bench", frozenset({"jobs"}))
    finally:
        await store.close()
    return key


def pgbench(url: str, clients: int, duration: float, work: Path) -> dict[str, Any]:
    """Run pgbench with onejob's creation SQL; return TPS and latency."""
    from gateway.store.creation_sql import pgbench_script

    script = work / "create.sql"
    script.write_text(pgbench_script(), encoding="utf-8")
    out = subprocess.run(
        [
            "pgbench",
            "-n",
            "-M",
            "prepared",
            "-f",
            str(script),
            "-c",
            str(clients),
            "-j",
            str(min(clients, WRK_THREADS)),
            "-T",
            str(int(duration)),
            libpq(url),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=duration + 60,
    )
    tps = re.search(r"tps = ([\d.]+)", out.stdout)
    lat = re.search(r"latency average = ([\d.]+) ms", out.stdout)
    if tps is None:
        raise SystemExit(f"pgbench failed:\n{out.stdout}\n{out.stderr}")
    return {
        "clients": clients,
        "tps": round(float(tps.group(1)), 1),
        "latency_avg_ms": float(lat.group(1)) if lat else None,
    }


# -- processes ---------------------------------------------------------------------------------


def gateway_settings(
    url: str, port: int, upstream: str, *, dispatcher: bool, runners: int, work: Path
) -> Path:
    """Write the gateway's settings (one provider: the upstream) and return the file."""
    settings = Settings.model_validate(
        {
            "database_url": url,
            "port": port,
            "instance_id": f"compare-{os.getpid()}",
            "log_level": "WARNING",
            "certifications_path": str(work / "certifications.json"),
            "providers": {
                "upstream": {
                    "protocol": "openai",
                    "base_url": f"{upstream}/v1",
                    "model": "bench-gpt",
                    "timeout": 30.0,
                }
            },
            "routes": {"*": {"primary": "upstream"}},
            "dispatcher": {"enabled": dispatcher, "runners": runners},
        }
    )
    path = work / f"settings-{port}.json"
    path.write_text(settings.model_dump_json(), encoding="utf-8")
    return path


@contextlib.asynccontextmanager
async def gateway(settings: Path, port: int, work: Path, workers: int) -> Any:
    """Run one gateway process (``--workers`` children when > 1); yield its PID."""
    log = work / f"gateway-{port}.log"
    cmd = ["-m", "scenarios.load.gateway_proc", "--settings", str(settings)]
    if workers > 1:
        cmd += ["--workers", str(workers)]
    with child(cmd, log) as proc:
        await ready(f"http://127.0.0.1:{port}/healthz", proc, log)
        yield proc.pid


async def seed_replay_keys(base: str, key: str, payload: dict[str, Any]) -> None:
    """Create the jobs the replay run asks for again."""
    async with httpx.AsyncClient(timeout=30) as client:
        for n in range(REPLAY_KEYS):
            r = await client.post(
                f"{base}/v1/jobs",
                json=payload,
                headers={"Authorization": f"Bearer {key}", "Idempotency-Key": f"replay-{n}"},
            )
            r.raise_for_status()


# -- the run -----------------------------------------------------------------------------------


async def run_database(
    kind: str, args: argparse.Namespace, upstream: str, work: Path
) -> dict[str, Any]:
    """Measure one database: pgbench (PostgreSQL), creation, replay, sync."""
    out: dict[str, Any] = {"database": kind}
    payload = {"contract": CONTRACT, "input": INPUT}
    body = json.dumps(payload)
    with database(kind, work) as url:
        key = await prepare(url)
        if kind == "postgresql":
            out["pgbench"] = []
            for clients in (8, 16):
                say(f"[{kind}] pgbench, onejob's creation SQL, {clients} clients")
                out["pgbench"].append(pgbench(url, clients, args.duration, work))
                say(f"  {out['pgbench'][-1]}")

        port = free_port()
        cfg = gateway_settings(
            url, port, upstream, dispatcher=False, runners=args.runners, work=work
        )
        base = f"http://127.0.0.1:{port}"
        async with gateway(cfg, port, work, args.workers):
            say(f"[{kind}] creation, dispatcher off, 16 connections")
            script = wrk_scripts.write(
                work / "create.lua", wrk_scripts.create_jobs(key, body, wait=None)
            )
            run_wrk(base, script, connections=2, duration=2, prefix="warm")
            out["creation_16"] = run_wrk(
                base, script, connections=16, duration=args.duration, prefix="c16"
            )
            say(f"  {out['creation_16']['rps']} req/s, p50 {out['creation_16']['p50_ms']} ms")
            await seed_replay_keys(base, key, payload)
            say(f"[{kind}] replay, 16 connections")
            script = wrk_scripts.write(
                work / "replay.lua", wrk_scripts.replay_jobs(key, body, REPLAY_KEYS)
            )
            out["replay_16"] = run_wrk(
                base, script, connections=16, duration=args.duration, prefix="r16"
            )
            say(f"  {out['replay_16']['rps']} req/s, p50 {out['replay_16']['p50_ms']} ms")

    # The sync runs get a database of their own: the jobs queued above (no dispatcher)
    # would otherwise be run first.
    with database(kind, work) as url:
        key = await prepare(url)
        port = free_port()
        cfg = gateway_settings(
            url, port, upstream, dispatcher=True, runners=args.runners, work=work
        )
        base = f"http://127.0.0.1:{port}"
        async with gateway(cfg, port, work, args.workers) as pid:
            script = wrk_scripts.write(
                work / "sync.lua", wrk_scripts.create_jobs(key, body, wait=30)
            )
            run_wrk(base, script, connections=4, duration=2, prefix="warm")
            rss_before = tree_rss_kib(pid)
            say(f"[{kind}] sync durable jobs, 16 connections")
            out["sync_16"] = run_wrk(
                base, script, connections=16, duration=args.duration, prefix="s16"
            )
            say(f"  {out['sync_16']['rps']} jobs/s, p50 {out['sync_16']['p50_ms']} ms")
            say(f"[{kind}] sync durable jobs, 1 connection")
            out["sync_1"] = run_wrk(
                base, script, connections=1, duration=args.duration, prefix="s1"
            )
            say(f"  p50 {out['sync_1']['p50_ms']} ms, p99 {out['sync_1']['p99_ms']} ms")
            out["gateway_rss_kib"] = {"after_warmup": rss_before, "after_runs": tree_rss_kib(pid)}
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run everything and return the report."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    report: dict[str, Any] = {
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip(),
        "duration_s": args.duration,
        "workers": args.workers,
        "runners": args.runners,
        "loadavg_at_start": os.getloadavg(),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "databases": [],
    }
    with tempfile.TemporaryDirectory(prefix="onejob-compare-") as tmp:
        work = Path(tmp)
        port = free_port()
        upstream = f"http://127.0.0.1:{port}"
        log = work / "upstream.log"
        with child(["-m", "scenarios.load.upstream", "--port", str(port)], log) as proc:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with contextlib.suppress(OSError):
                    with socket_to(port):
                        break
                await asyncio.sleep(0.05)
            upstream_body = json.dumps({"model": "bench-gpt", "messages": []})
            script = wrk_scripts.write(
                work / "upstream.lua", wrk_scripts.upstream_calls(upstream_body)
            )
            say("upstream alone, 16 connections and 1")
            report["upstream_16"] = run_wrk(
                upstream, script, connections=16, duration=args.duration, prefix="u"
            )
            report["upstream_1"] = run_wrk(
                upstream, script, connections=1, duration=args.duration, prefix="u"
            )
            say(
                f"  {report['upstream_16']['rps']} req/s; p50 at 1 connection {report['upstream_1']['p50_ms']} ms"
            )
            for kind in args.databases.split(","):
                report["databases"].append(await run_database(kind, args, upstream, work))
            assert proc.poll() is None, "the upstream died"
    report["loadavg_at_end"] = os.getloadavg()
    report["ratios"] = ratios(report)
    return report


@contextlib.contextmanager
def socket_to(port: int) -> Iterator[None]:
    """Connect once to ``port`` (raises OSError while nothing listens)."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=1):
        yield


def ratios(report: dict[str, Any]) -> dict[str, Any]:
    """Compute P1-P3 from the figures of this run."""
    out: dict[str, Any] = {}
    upstream_p50 = report["upstream_1"]["p50_ms"]
    for db in report["databases"]:
        kind = db["database"]
        r: dict[str, Any] = {}
        if "pgbench" in db:
            pg16 = next(p for p in db["pgbench"] if p["clients"] == 16)["tps"]
            r["P1_creation_vs_pgbench_16"] = round(db["creation_16"]["rps"] / pg16, 3)
        r["P1_replay_vs_creation"] = round(
            db["replay_16"]["rps"] / max(db["creation_16"]["rps"], 0.1), 3
        )
        r["P2_sync_jobs_per_s_16"] = db["sync_16"]["rps"]
        r["P2_sync_vs_upstream_16"] = round(db["sync_16"]["rps"] / report["upstream_16"]["rps"], 4)
        r["P3_overhead_p50_ms"] = round(db["sync_1"]["p50_ms"] - upstream_p50, 3)
        r["P3_sync_p99_ms"] = db["sync_1"]["p99_ms"]
        out[kind] = r
    return out


def summary(report: dict[str, Any]) -> str:
    """Render the figures and the goals as a short table."""
    lines = [
        f"commit {report['commit']}, load average at start {report['loadavg_at_start'][0]:.2f}, "
        f"at end {report['loadavg_at_end'][0]:.2f}; {report['workers']} worker(s)",
        f"upstream alone: {report['upstream_16']['rps']} req/s at 16 connections, "
        f"p50 {report['upstream_1']['p50_ms']} ms at 1",
    ]
    for db in report["databases"]:
        kind = db["database"]
        r = report["ratios"][kind]
        if "pgbench" in db:
            lines.append(
                f"[{kind}] pgbench creation SQL: "
                + ", ".join(f"{p['clients']} clients {p['tps']} TPS" for p in db["pgbench"])
            )
            lines.append(
                f"[{kind}] P1 creation {db['creation_16']['rps']} req/s = {r['P1_creation_vs_pgbench_16']}x pgbench (goal >= {GOALS['P1_creation_vs_pgbench']}x)"
            )
        else:
            lines.append(f"[{kind}] creation {db['creation_16']['rps']} req/s")
        lines.append(
            f"[{kind}] P1 replay {db['replay_16']['rps']} req/s = {r['P1_replay_vs_creation']}x creation (goal >= 1x)"
        )
        goal2 = GOALS["P2_sync_jobs_per_s"][kind]  # type: ignore[index]
        lines.append(
            f"[{kind}] P2 sync {db['sync_16']['rps']} jobs/s at 16 connections (goal >= {goal2}); bad answers {db['sync_16']['bad'] + db['sync_16']['socket_errors']}"
        )
        goal3 = GOALS["P3_overhead_p50_ms"][kind]  # type: ignore[index]
        lines.append(
            f"[{kind}] P3 overhead p50 {r['P3_overhead_p50_ms']} ms above the upstream (goal <= {goal3}); sync p50 {db['sync_1']['p50_ms']} ms, p99 {r['P3_sync_p99_ms']} ms"
        )
        rss = db["gateway_rss_kib"]
        lines.append(
            f"[{kind}] gateway RSS {rss['after_warmup'] // 1024} MiB after warm-up, {rss['after_runs'] // 1024} MiB after the runs"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison, print the summary, write the JSON."""
    parser = argparse.ArgumentParser(
        prog="python -m scenarios.load.compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--databases", default="postgresql,sqlite")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per wrk run")
    parser.add_argument("--workers", type=int, default=1, help="gateway worker processes")
    parser.add_argument("--runners", type=int, default=16)
    parser.add_argument("--out", default=str(ROOT / "reports/out/compare.json"))
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    report = asyncio.run(run(args))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(summary(report))
    say(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
