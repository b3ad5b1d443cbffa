"""The duel's figures: per figure, each side's median and the median of the rounds' ratios."""

from __future__ import annotations

from typing import Any

from bench import duel
from bench.lib.rounds import new_over_base


def side(rps: float, p50: float, cpu: float) -> dict[str, Any]:
    return {"rps": rps, "p50_ms": p50, "p99_ms": 2 * p50, "cpu_ms": cpu}


def test_the_ratio_is_the_median_of_the_rounds_not_of_the_medians() -> None:
    # The host slows down over the rounds; within each round the new side is ~1.1x.
    rounds = [
        {"base": side(1000, 10, 0.5), "new": side(1100, 9, 0.45)},
        {"base": side(500, 20, 1.0), "new": side(560, 18, 0.9)},
        {"base": side(800, 12, 0.6), "new": side(880, 11, 0.57)},
    ]
    r = new_over_base(rounds, duel.FIGURES)
    assert r["rps"] == {
        "base": 800,
        "new": 880,
        "new_over_base": 1.1,
        "rounds": [1.1, 1.12, 1.1],
    }
    assert r["cpu_ms"]["new_over_base"] == 0.9
    report = {
        "base": "abc",
        "new": "def",
        "mode": "create",
        "database": "postgresql",
        "connections": 16,
        "rounds": rounds,
        "ratios": r,
    }
    text = duel.summary(report)
    assert text.splitlines()[0] == "def over abc: create, postgresql, 16 connection(s), 3 rounds"
    assert "  rps: base 800, new 880, new/base 1.1x (rounds [1.1, 1.12, 1.1])" in text


def test_the_database_figure_is_there_only_when_every_round_has_it() -> None:
    with_db = [
        {
            "base": {**side(100, 1, 1.0), "db_cpu_ms": 0.4},
            "new": {**side(100, 1, 1.0), "db_cpu_ms": 0.5},
        }
    ]
    assert new_over_base(with_db, duel.FIGURES)["db_cpu_ms"]["new_over_base"] == 1.25
    sqlite = [{"base": {**side(100, 1, 1.0), "db_cpu_ms": None}, "new": side(100, 1, 1.0)}]
    assert "db_cpu_ms" not in new_over_base(sqlite, duel.FIGURES)
