"""The worker-count comparison: its figures, its summary and its arguments."""

from __future__ import annotations

from typing import Any

import pytest

from bench import workers
from bench.lib.rounds import new_over_base


def run(rps: float, cpu: float, host: float) -> dict[str, Any]:
    return {
        "rps": rps,
        "p50_ms": 10.0,
        "p99_ms": 20.0,
        "cpu_ms": cpu,
        "host_cpu_ms": host,
        "db_cpu_ms": None,
    }


def test_the_summary_reads_second_count_over_first_with_the_host_cpu() -> None:
    rounds = [
        {"base": run(1000, 0.6, 1.0), "new": run(1200, 0.4, 0.7)},
        {"base": run(800, 0.7, 1.1), "new": run(880, 0.5, 0.8)},
    ]
    report = {
        "commit": "abc",
        "workers": {"first": 2, "second": 1},
        "mode": "create",
        "database": "sqlite",
        "connections": 16,
        "rounds": rounds,
        "ratios": new_over_base(rounds, workers.FIGURES),
    }
    text = workers.summary(report)
    assert text.splitlines()[0] == (
        "abc: 1 worker(s) over 2, create, sqlite, 16 connection(s), 2 alternated rounds"
    )
    assert "  rps: 2 900.0, 1 1040.0, 1/2 1.15x (rounds [1.2, 1.1])" in text
    assert "host_cpu_ms" in report["ratios"]
    assert "db_cpu_ms" not in report["ratios"]  # SQLite has no backends


@pytest.mark.parametrize("counts", ["2", "2,1,4", "0,1", "two,one"])
def test_counts_must_be_two_numbers_of_at_least_one(counts: str) -> None:
    with pytest.raises(SystemExit) as exc:
        workers.main(["--counts", counts])
    assert exc.value.code == 2
