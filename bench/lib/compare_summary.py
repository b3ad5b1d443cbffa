"""The comparison's printed summary: every figure with its goal beside it."""

from __future__ import annotations

from typing import Any

from bench.lib.goals import GOALS
from bench.lib.p4 import P4_ROUNDS


def summary(report: dict[str, Any]) -> str:
    """Render the figures and the goals as a short table."""
    lines = [
        f"commit {report['commit']}, load average at start {report['loadavg_at_start'][0]:.2f},"
        f" at end {report['loadavg_at_end'][0]:.2f}; workers: "
        + ", ".join(f"{db['database']} {db.get('workers', '?')}" for db in report["databases"]),
        f"upstream alone: {report['upstream_16']['rps']} req/s at 16 connections,"
        f" p50 {report['upstream_1']['p50_ms']} ms at 1",
    ]
    for db in report["databases"]:
        kind, r = db["database"], report["ratios"][db["database"]]
        cpu = {
            k: db[k]["gateway_cpu_ms_per_request"] for k in ("creation_16", "replay_16", "sync_16")
        }
        c16, rounds = db["creation_16"], len(db["rounds"])
        lines.append(
            f"[{kind}] P1's figures: the median of {rounds} alternated rounds, each ratio the"
            " median of the rounds' ratios"
        )
        if "pgbench" in db:
            tps = ", ".join(f"{p['clients']}: {p['tps']} TPS" for p in db["pgbench"])
            lines.append(f"[{kind}] pgbench, the store's creation SQL, by clients: {tps}")
            lines.append(
                f"[{kind}] P1 creation {c16['rps']} req/s (rounds {c16['rounds_rps']}) ="
                f" {r['P1_creation_vs_pgbench_16']}x pgbench at 16"
                f" (rounds {db['pgbench'][-1]['rounds_tps']} TPS;"
                f" goal >= {GOALS['P1_creation_vs_pgbench']}x)"
            )
            if "P1_host_cpu_creation_vs_pgbench_txn" in r:
                pgb = {p["clients"]: p for p in db["pgbench"]}[16]
                gateway, wrk = c16["gateway_cpu_ms_per_request"], c16["wrk_cpu_ms_per_request"]
                rest = c16["host_cpu_ms_per_request"] - gateway - wrk
                lines.append(
                    f"[{kind}]   host CPU per creation {c16['host_cpu_ms_per_request']} ms"
                    f" (gateway {gateway}, wrk {wrk}, the rest, mostly the database,"
                    f" {rest:.3f}) ="
                    f" {r['P1_host_cpu_creation_vs_pgbench_txn']}x pgbench's"
                    f" {pgb['host_cpu_ms_per_txn']} ms per transaction"
                )
        else:
            lines.append(
                f"[{kind}] creation {c16['rps']} req/s at 16 connections"
                f" (rounds {c16['rounds_rps']})"
            )
        lines.append(
            f"[{kind}] P1 replay {db['replay_16']['rps']} req/s"
            f" (rounds {db['replay_16']['rounds_rps']}) ="
            f" {r['P1_replay_vs_creation']}x creation (goal >= 1x)"
        )
        if "P5_hot_replay_vs_surge" in r:
            lines.append(
                f"[{kind}] P5 one key replayed {db['hot_replay_16']['rps']} req/s right after"
                f" {db['surge_creation_16']['rps']} creations/s, tables never analyzed ="
                f" {r['P5_hot_replay_vs_surge']}x (goal >= {GOALS['P5_hot_replay_vs_surge']}x)"
            )
        goal2 = GOALS["P2_sync_jobs_per_s"][kind]  # type: ignore[index]
        bad = db["sync_16"]["bad"] + db["sync_16"]["socket_errors"]
        lines.append(
            f"[{kind}] P2 sync {db['sync_16']['rps']} jobs/s at 16 connections"
            f" (goal >= {goal2}); answers not succeeded: {bad}"
        )
        goal3 = GOALS["P3_overhead_p50_ms"][kind]  # type: ignore[index]
        floor = (
            f"; two commits take {r['P3_commit_floor_ms']} ms" if "P3_commit_floor_ms" in r else ""
        )
        each = f" (rounds {r['P3_rounds_ms']})" if "P3_rounds_ms" in r else ""
        lines.append(
            f"[{kind}] P3 overhead p50 {r['P3_overhead_p50_ms']} ms above the upstream{each}"
            f" (goal <= {goal3}){floor}; p99 {r['P3_sync_p99_ms']} ms"
        )
        if "P3_bare_floor_ms" in r:
            lines.append(
                f"[{kind}]   the bare floor (the same statements and call, nothing else)"
                f" {r['P3_bare_floor_ms']} ms above the upstream; onejob's P3 ="
                f" {r['P3_over_bare_floor']}x it (rounds {r['P3_over_bare_floor_rounds']})"
            )
        if "P4_creation_p99_seeded_vs_empty" in r:
            p4 = db["p4"]
            lines.append(
                f"[{kind}] P4 creation p99 with {db['seed']['jobs']} jobs seeded ="
                f" {r['P4_creation_p99_seeded_vs_empty']}x the nearly empty table's"
                f" (goal <= 1.1x), medians of {P4_ROUNDS} alternated rounds:"
                f" {p4['seeded']['p99_ms']} against {p4['empty']['p99_ms']} ms;"
                f" answers not 201/200: {p4['seeded']['bad'] + p4['empty']['bad']}"
            )
        lines.append(f"[{kind}] gateway CPU per request (ms): {cpu}")
        rss = db["gateway_rss_kib"]
        lines.append(
            f"[{kind}] gateway RSS {rss['after_warmup'] // 1024} MiB after warm-up,"
            f" {rss['after_runs'] // 1024} MiB after the runs"
        )
        if "soak" in db:
            mib = [k // 1024 for k in db["soak"]["rss_kib"]]
            lines.append(
                f"[{kind}] soak {db['soak']['seconds']:.0f} s, {db['soak']['jobs']} jobs:"
                f" RSS MiB {mib}"
            )
    lines.extend(peer_summary(report))
    return "\n".join(lines)


def peer_summary(report: dict[str, Any]) -> list[str]:
    """Render the peers' figures and onejob's ratios to them (none without ``--peers``)."""
    lines: list[str] = []
    measured = report.get("peers", {})
    for name, peer in measured.items():
        title = peer["title"]
        if "error" in peer:
            lines.append(f"[{name}] {title}: not measured: {peer['error']}")
            continue
        c16, c1 = peer["load_16"], peer["load_1"]
        bad = sum(r["bad"] + r["socket_errors"] for r in (c16, c1))
        lines.append(
            f"[{name}] {title} ({peer['requirements'][0]}, 1 worker): {c16['rps']} req/s at 16"
            f" connections (p50 {c16['p50_ms']} ms, p99 {c16['p99_ms']} ms);"
            f" p50 {c1['p50_ms']} ms at 1; CPU per request"
            f" {c16['gateway_cpu_ms_per_request']} ms; answers not 200: {bad}"
        )
    goals = GOALS["peers_sync_ratio_postgresql"]
    assert isinstance(goals, dict)
    for db in report["databases"] if measured else []:
        kind, r = db["database"], report["ratios"][db["database"]]
        parts = []
        for name in measured:
            if f"sync_vs_{name}_16" not in r:
                continue
            goal = f" (goal >= {goals[name]}x)" if kind == "postgresql" else ""
            parts.append(f"{r[f'sync_vs_{name}_16']}x {measured[name]['title']}{goal}")
        if parts:
            p50 = [f"onejob {db['sync_1']['p50_ms']} ms"] + [
                f"{m['title']} {m['load_1']['p50_ms']} ms"
                for n, m in measured.items()
                if "load_1" in m
            ]
            lines.append(f"[{kind}] sync jobs/s at 16 connections = {', '.join(parts)}")
            lines.append(f"[{kind}] p50 at 1 connection: {', '.join(p50)}")
    return lines
