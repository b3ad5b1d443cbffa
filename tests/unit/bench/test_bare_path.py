"""The bare floor beside P3: onejob's P3 over the bare server's, per round, and refusals;
the bare server's runs alternate with the others in P3's rounds."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from bench.lib import goals, p3


def _round(upstream: float, bare: float, sync: float, *, bad: int = 0) -> dict[str, Any]:
    def run(p50: float) -> dict[str, Any]:
        return {"p50_ms": p50, "p99_ms": 9.0, "ok": 100, "bad": 0, "rps": 100.0}

    return {"upstream": run(upstream), "bare": {**run(bare), "bad": bad}, "sync": run(sync)}


def test_the_ratio_is_the_median_of_the_rounds_ratios() -> None:
    # Above the upstream: bare 1.0, 2.0, 1.5; onejob 3.0, 5.0, 6.0; ratios 3.0, 2.5, 4.0.
    rounds = [_round(0.1, 1.1, 3.1), _round(0.2, 2.2, 5.2), _round(0.1, 1.6, 6.1)]
    out = p3.p3_floor(rounds)
    assert out["above_upstream_ms"] == {"bare": [1.0, 2.0, 1.5], "sync": [3.0, 5.0, 6.0]}
    assert out["bare_p3_ms"] == 1.5
    assert out["onejob_p3_ms"] == 5.0
    assert out["rounds_onejob_over_bare"] == [3.0, 2.5, 4.0]
    assert out["onejob_over_bare"] == 3.0  # not 5.0 / 1.5


def test_a_run_with_answers_other_than_succeeded_jobs_is_refused() -> None:
    with pytest.raises(SystemExit, match="round 2: bare"):
        p3.p3_floor([_round(0.1, 1.1, 3.1), _round(0.1, 1.1, 3.1, bad=3)])


def test_the_bare_server_runs_in_p3s_rounds_and_its_floor_is_reported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    order: list[str] = []
    p50 = {"upstream": iter([0.1, 0.1, 0.1]), "bare": iter([1.1, 1.6, 2.1])}

    def run_wrk(url: str, script: Path, **kw: Any) -> dict[str, Any]:
        side = "bare" if url == "http://bare" else "upstream"
        order.append(side)
        return {"p50_ms": next(p50[side]), "p99_ms": 9.0, "ok": 10, "bad": 0, "rps": 1.0}

    def measure(base: str, script: Path, **kw: Any) -> dict[str, Any]:
        order.append("sync")
        return {"p50_ms": 4.1, "p99_ms": 9.0, "ok": 10, "bad": 0, "rps": 1.0}

    monkeypatch.setattr(p3, "run_wrk", run_wrk)
    monkeypatch.setattr(p3, "measure", measure)
    monkeypatch.setattr(p3, "say", lambda *_: None)
    monkeypatch.setattr("bench.lib.rounds.say", lambda *_: None)
    rounds = p3.p3_rounds(
        "postgresql",
        ("http://gw", tmp_path / "sync.lua", 7),
        "http://up",
        tmp_path / "upstream.lua",
        argparse.Namespace(duration=1.0, rounds=3),
        ("http://bare", tmp_path / "bare.lua"),
    )
    first = ["upstream", "sync", "bare"]
    assert order == first + first[::-1] + first  # each round reverses the last
    db = {
        "database": "postgresql",
        "rounds": [{"creation": {"rps": 100.0}, "replay": {"rps": 110.0}}],
        "creation_16": {"rps": 100.0},
        "sync_16": {"rps": 400.0},
        "p3_rounds": rounds,
        "sync_1": p3.p3_run(rounds),
    }
    ratios = goals.ratios({"upstream_1": {"p50_ms": 0.1}, "databases": [db]})["postgresql"]
    # onejob 4.0 above in every round; the floor 1.0, 1.5, 2.0: ratios 4.0, 2.667, 2.0.
    assert ratios["P3_overhead_p50_ms"] == 4.0
    assert ratios["P3_bare_floor_ms"] == 1.5
    assert ratios["P3_over_bare_floor_rounds"] == [4.0, 2.667, 2.0]
    assert ratios["P3_over_bare_floor"] == 2.667
