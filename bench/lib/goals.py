"""The comparison's goals (issue 9's P1-P4, P5, the peers) and the ratios a report gives."""

from __future__ import annotations

import statistics
from typing import Any

from bench.lib.p3 import p3_above, p3_floor
from bench.lib.rounds import median_ratio

#: Goals of issue 9 (ratios and floors), printed beside the figures.
GOALS = {
    "P1_creation_vs_pgbench": 0.5,
    "P2_sync_jobs_per_s": {"postgresql": 300.0, "sqlite": 150.0},
    "P3_overhead_p50_ms": {"postgresql": 3.0, "sqlite": 5.0},
    # One key replayed right after a surge of creations, no ANALYZE, over the surge's rate.
    "P5_hot_replay_vs_surge": 0.5,
    # onejob's PostgreSQL sync jobs/s over each peer's req/s at 16 connections.
    "peers_sync_ratio_postgresql": {"litellm": 5.0, "dbos": 3.0},
}


def ratios(report: dict[str, Any]) -> dict[str, Any]:
    """Compute P1-P4 from the figures of this run."""
    out: dict[str, Any] = {}
    upstream_p50 = report["upstream_1"]["p50_ms"]
    for db in report["databases"]:
        r: dict[str, Any] = {}
        creation, rounds = db["creation_16"], db["rounds"]
        if "pgbench" in db:
            by_clients = {p["clients"]: p for p in db["pgbench"]}
            # The median of the rounds' ratios (``alternated_rounds``).
            r["P1_creation_vs_pgbench_16"] = median_ratio(
                rounds, ("creation", "rps"), ("pgbench", "tps")
            )
            # Both CPU-bound on one host: P1 is about the inverse of this.
            per_txn = by_clients[16].get("host_cpu_ms_per_txn")
            if per_txn and creation.get("host_cpu_ms_per_request"):
                r["P1_host_cpu_creation_vs_pgbench_txn"] = round(
                    creation["host_cpu_ms_per_request"] / per_txn, 2
                )
            # Two commits per sync job (create, decide) cannot take less than this.
            r["P3_commit_floor_ms"] = round(2 * (by_clients[1]["latency_avg_ms"] or 0), 3)
        r["P1_replay_vs_creation"] = median_ratio(rounds, ("replay", "rps"), ("creation", "rps"))
        if "hot_replay_16" in db:  # P5: a report of the nineteenth session or later
            r["P5_hot_replay_vs_surge"] = round(
                db["hot_replay_16"]["rps"] / max(db["surge_creation_16"]["rps"], 1e-9), 3
            )
        r["P2_sync_jobs_per_s_16"] = db["sync_16"]["rps"]
        if "p3_rounds" in db:  # the median of the rounds' differences (``p3_rounds``)
            above = p3_above(db["p3_rounds"])
            r["P3_overhead_p50_ms"] = round(statistics.median(above), 3)
            r["P3_rounds_ms"] = [round(x, 3) for x in above]
            if all("bare" in round_ for round_ in db["p3_rounds"]):
                floor = p3_floor(db["p3_rounds"])
                r["P3_bare_floor_ms"] = floor["bare_p3_ms"]
                r["P3_over_bare_floor"] = floor["onejob_over_bare"]
                r["P3_over_bare_floor_rounds"] = floor["rounds_onejob_over_bare"]
        else:  # a report of before the fifteenth session: one run against the first upstream
            r["P3_overhead_p50_ms"] = round(db["sync_1"]["p50_ms"] - upstream_p50, 3)
        r["P3_sync_p99_ms"] = db["sync_1"]["p99_ms"]
        if "p4" in db:
            seeded, empty = db["p4"]["seeded"]["median_p99_ms"], db["p4"]["empty"]["median_p99_ms"]
            r["P4_creation_p99_seeded_vs_empty"] = round(seeded / max(empty, 0.001), 3)
        for name, peer in report.get("peers", {}).items():
            if "load_16" in peer:
                ratio = db["sync_16"]["rps"] / max(peer["load_16"]["rps"], 0.1)
                r[f"sync_vs_{name}_16"] = round(ratio, 2)
        out[db["database"]] = r
    return out
