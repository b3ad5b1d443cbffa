"""A wrk run with what it cost: the CPU of the gateway, of wrk, of the whole host, of
PostgreSQL's backends, per good answer; and the gateway's memory."""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.lib.children import say
from bench.lib.databases import PG_ADMIN
from bench.lib.wrk import run_wrk


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


def tree_cpu_s(pid: int) -> float:
    """Return the user+system CPU seconds of a process and its children so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    with contextlib.suppress(OSError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / ticks
        for child_pid in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            total += tree_cpu_s(int(child_pid))
    return total


def host_busy_s() -> float:
    """Return the CPU seconds this host's cores have spent running its own work, so far:
    user, nice, system, irq and softirq; not idle, iowait, or steal (the hypervisor
    running someone else's)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    """Return the user+system CPU seconds of this process's children that have ended."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(
    base: str, script: Path, *, connections: int, duration: float, prefix: str, pid: int
) -> dict[str, Any]:
    """Run wrk against the gateway; add the CPU time per good answer of the gateway, of
    wrk, and of the whole host (the rest is the database's, and the upstream's)."""
    before, host, kids = tree_cpu_s(pid), host_busy_s(), children_cpu_s()
    result = run_wrk(base, script, connections=connections, duration=duration, prefix=prefix)
    ok = max(result["ok"], 1)
    result["gateway_cpu_ms_per_request"] = round((tree_cpu_s(pid) - before) * 1000 / ok, 3)
    result["wrk_cpu_ms_per_request"] = round((children_cpu_s() - kids) * 1000 / ok, 3)
    result["host_cpu_ms_per_request"] = round((host_busy_s() - host) * 1000 / ok, 3)
    return result


def backends_cpu_s(url: str) -> dict[int, float]:
    """Return the CPU seconds so far of each PostgreSQL backend connected to ``url``'s
    database (none for SQLite)."""
    if not url.startswith("postgresql"):
        return {}
    name = url.rsplit("/", 1)[1]
    query = f"SELECT pid FROM pg_stat_activity WHERE datname = '{name}'"
    pids = subprocess.run(
        ["psql", PG_ADMIN, "-Atc", query], capture_output=True, text=True, check=True
    ).stdout.split()
    return {int(pid): tree_cpu_s(int(pid)) for pid in pids}


def at_16_and_1(
    base: str,
    script: Path,
    seconds: float,
    pid: int,
    *,
    label: str,
    prefix: str,
    unit: str = "req/s",
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Measure ``script`` at 16 connections, then at 1, printing each; yield both runs."""
    for connections in (16, 1):
        yield (
            connections,
            measured(
                base, script, seconds, pid, connections, label=label, prefix=prefix, unit=unit
            ),
        )


def measured(
    base: str,
    script: Path,
    seconds: float,
    pid: int,
    connections: int,
    *,
    label: str,
    prefix: str,
    unit: str = "req/s",
) -> dict[str, Any]:
    """Measure ``script`` at ``connections``, printing what and the figures; return the run."""
    say(f"{label} {connections} connection(s)")
    run = measure(
        base,
        script,
        connections=connections,
        duration=seconds,
        prefix=f"{prefix}{connections}",
        pid=pid,
    )
    say(f"  {run['rps']} {unit}, p50 {run['p50_ms']} ms, p99 {run['p99_ms']} ms")
    return run
