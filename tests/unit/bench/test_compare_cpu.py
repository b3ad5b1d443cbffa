"""The comparison's CPU accounting: per good answer, the gateway's, wrk's and the host's,
and P1's cause beside it (the host CPU a creation costs against pgbench's transaction)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import pytest

from bench.lib import compare_summary, goals, measure, p3
from bench.lib.rounds import alternated_rounds, median_ratio, median_run, odd_count


def test_host_busy_time_counts_this_process_spinning() -> None:
    before = measure.host_busy_s()
    ends = time.process_time() + 0.3
    while time.process_time() < ends:
        pass
    assert measure.host_busy_s() - before >= 0.2  # ticks of 10 ms: allow a little


def test_measure_divides_each_cpu_by_the_good_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    clocks = {"tree": iter([10.0, 12.0]), "host": iter([100.0, 105.0]), "kids": iter([1.0, 1.5])}
    monkeypatch.setattr(measure, "tree_cpu_s", lambda pid: next(clocks["tree"]))
    monkeypatch.setattr(measure, "host_busy_s", lambda: next(clocks["host"]))
    monkeypatch.setattr(measure, "children_cpu_s", lambda: next(clocks["kids"]))
    monkeypatch.setattr(measure, "run_wrk", lambda *a, **kw: {"ok": 1000, "rps": 500.0})
    out = measure.measure("http://x", Path("s.lua"), connections=16, duration=2, prefix="c", pid=1)
    assert out["gateway_cpu_ms_per_request"] == 2.0
    assert out["wrk_cpu_ms_per_request"] == 0.5
    assert out["host_cpu_ms_per_request"] == 5.0


def run(rps: float, **extra: Any) -> dict[str, Any]:
    return {"rps": rps, "p50_ms": 1.0, "p99_ms": 3.0, "bad": 0, "socket_errors": 0, **extra}


def test_p1_is_read_beside_the_host_cpu_of_a_creation() -> None:
    creation = run(
        1000.0,
        gateway_cpu_ms_per_request=0.6,
        wrk_cpu_ms_per_request=0.05,
        host_cpu_ms_per_request=1.2,
    )
    pgbench16 = {"clients": 16, "tps": 4000.0, "host_cpu_ms_per_txn": 0.4}
    replay = run(1100.0, gateway_cpu_ms_per_request=0.5)
    rounds = [{"pgbench": pgbench16, "creation": creation, "replay": replay}]
    report: dict[str, Any] = {
        "commit": "abc",
        "loadavg_at_start": [0.1],
        "loadavg_at_end": [0.2],
        "upstream_16": run(80000.0),
        "upstream_1": run(9000.0),
        "databases": [
            {
                "database": "postgresql",
                "workers": 1,
                "pgbench": [
                    {"clients": 1, "tps": 1500.0, "latency_avg_ms": 0.6},
                    median_run(rounds, "pgbench", "tps"),
                ],
                "rounds": rounds,
                "creation_16": median_run(rounds, "creation", "rps"),
                "replay_16": median_run(rounds, "replay", "rps"),
                "sync_16": run(400.0, gateway_cpu_ms_per_request=2.0),
                "sync_1": run(200.0),
                "gateway_rss_kib": {"after_warmup": 102400, "after_runs": 102400},
            }
        ],
    }
    report["ratios"] = goals.ratios(report)
    assert report["ratios"]["postgresql"]["P1_creation_vs_pgbench_16"] == 0.25
    assert report["ratios"]["postgresql"]["P1_host_cpu_creation_vs_pgbench_txn"] == 3.0
    text = compare_summary.summary(report)
    assert "host CPU per creation 1.2 ms (gateway 0.6, wrk 0.05," in text
    assert "mostly the database, 0.550) = 3.0x pgbench's 0.4 ms per transaction" in text


def test_rounds_alternate_their_order_and_p1_is_the_median_of_the_rounds_ratios(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    order: list[str] = []
    # A host that slows down from round to round: each run is slower than the last.
    speed = iter(range(100, 0, -10))

    def runner(name: str) -> Any:
        def one(n: int) -> dict[str, Any]:
            order.append(name)
            rate = float(next(speed))
            return {"tps": rate * 4} if name == "pgbench" else run(rate * 2)

        return one

    monkeypatch.setattr("bench.lib.rounds.say", lambda *_: None)
    names = ("creation", "replay", "pgbench")
    rounds = alternated_rounds("postgresql", {n: runner(n) for n in names}, 3)
    assert order == [*names, *names[::-1], *names]
    # Round 1: creation 200, replay 180, pgbench 320; round 2: pgbench 280, replay 120,
    # creation 100; round 3: creation 80, replay 60, pgbench 80. Ratios of creation to
    # pgbench 0.625, 0.357, 1.0; of replay to creation 0.9, 1.2, 0.75.
    assert [r["creation"]["rps"] for r in rounds] == [200.0, 100.0, 80.0]
    assert median_ratio(rounds, ("creation", "rps"), ("pgbench", "tps")) == 0.625
    assert median_ratio(rounds, ("replay", "rps"), ("creation", "rps")) == 0.9
    median = median_run(rounds, "creation", "rps")
    assert median["rps"] == 100.0 and median["rounds_rps"] == [200.0, 100.0, 80.0]


def test_p3_is_the_median_of_the_rounds_differences_beside_the_upstream(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    order: list[tuple[str, int]] = []
    # Each round, the gateway's p50 and the upstream's, taken side by side; round 2 ran
    # in a slow phase of the host, which both of its runs show.
    gateway_p50 = iter([3.0, 4.4, 3.2])
    upstream_p50 = iter([0.1, 1.6, 0.1])

    def run_wrk(url: str, script: Path, **kw: Any) -> dict[str, Any]:
        order.append(("upstream", kw["connections"]))
        assert (url, script) == ("http://up", tmp_path / "upstream.lua")
        return {**run(9000.0), "p50_ms": next(upstream_p50)}

    def measure(base: str, script: Path, **kw: Any) -> dict[str, Any]:
        order.append(("sync", kw["connections"]))
        assert kw["pid"] == 7
        return {**run(300.0), "p50_ms": next(gateway_p50), "p99_ms": 9.0}

    monkeypatch.setattr(p3, "run_wrk", run_wrk)
    monkeypatch.setattr(p3, "measure", measure)
    monkeypatch.setattr(p3, "say", lambda *_: None)
    monkeypatch.setattr("bench.lib.rounds.say", lambda *_: None)
    args = argparse.Namespace(duration=1.0, rounds=3)
    rounds = p3.p3_rounds(
        "postgresql",
        ("http://gw", tmp_path / "sync.lua", 7),
        "http://up",
        tmp_path / "upstream.lua",
        args,
    )
    up, sync = ("upstream", 1), ("sync", 1)
    assert order == [up, sync, sync, up, up, sync]  # each round reverses the last
    db = {
        "database": "sqlite",
        "rounds": [{"creation": run(100.0), "replay": run(110.0)}],
        "creation_16": run(100.0),
        "sync_16": run(400.0),
        "p3_rounds": rounds,
        "sync_1": p3.p3_run(rounds),
    }
    # Per round: 2.9, 2.8, 3.1, whose median is 2.9 (round 1). The median sync run (3.2 ms) less
    # the median upstream run (0.1) would say 3.1, and less the run of the start
    # (``upstream_1``, 1.0 ms here) 2.2.
    ratios = goals.ratios({"upstream_1": run(9000.0), "databases": [db]})["sqlite"]
    assert ratios["P3_rounds_ms"] == [2.9, 2.8, 3.1]
    assert ratios["P3_overhead_p50_ms"] == 2.9
    # The run reported beside P3 (its p99) is round 1's, P3's own; the median sync run by
    # p50 would be round 3's (3.2 ms).
    assert db["sync_1"]["p50_ms"] == 3.0
    assert db["sync_1"]["rounds_p50_ms"] == [3.0, 4.4, 3.2]


@pytest.mark.parametrize("given", ["2", "4", "0", "-1"])
def test_rounds_must_be_an_odd_count(given: str) -> None:
    """An even count would make a median the mean of two rounds, which no run measured."""
    with pytest.raises(argparse.ArgumentTypeError):
        odd_count(given)
    assert odd_count("5") == 5


def test_alternated_rounds_say_jobs_per_second_for_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    monkeypatch.setattr("bench.lib.rounds.say", said.append)
    runs = {
        "sync": lambda n: {"rps": 100.0, "p50_ms": 3.0},
        "pgbench": lambda n: {"tps": 900.0, "p50_ms": 1.0},
        "replay": lambda n: {"rps": 800.0, "p50_ms": 2.0},
    }
    alternated_rounds("postgresql", runs, 1, connections=1)
    figures = [line for line in said if line.startswith("  ")]
    assert figures == [
        "  100.0 jobs/s, p50 3.0 ms",
        "  900.0 TPS, p50 1.0 ms",
        "  800.0 req/s, p50 2.0 ms",
    ]
