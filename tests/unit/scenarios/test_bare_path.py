"""The bare path's report: onejob's P3 over the bare server's, per round, and refusals."""

from __future__ import annotations

from typing import Any

import pytest

from scenarios.load import bare_path


def _round(upstream: float, bare: float, sync: float, *, bad: int = 0) -> dict[str, Any]:
    def run(p50: float) -> dict[str, Any]:
        return {"p50_ms": p50, "ok": 100, "bad": 0}

    return {"upstream": run(upstream), "bare": {**run(bare), "bad": bad}, "sync": run(sync)}


def test_the_ratio_is_the_median_of_the_rounds_ratios(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bare_path.compare, "commit", lambda: "abc1234")
    # Above the upstream: bare 1.0, 2.0, 1.5; onejob 3.0, 5.0, 6.0; ratios 3.0, 2.5, 4.0.
    rounds = [_round(0.1, 1.1, 3.1), _round(0.2, 2.2, 5.2), _round(0.1, 1.6, 6.1)]
    out = bare_path.report(rounds)
    assert out["above_upstream_ms"] == {"bare": [1.0, 2.0, 1.5], "sync": [3.0, 5.0, 6.0]}
    assert out["bare_p3_ms"] == 1.5
    assert out["onejob_p3_ms"] == 5.0
    assert out["rounds_onejob_over_bare"] == [3.0, 2.5, 4.0]
    assert out["onejob_over_bare"] == 3.0  # not 5.0 / 1.5


def test_a_run_with_answers_other_than_succeeded_jobs_is_refused() -> None:
    with pytest.raises(SystemExit, match="round 2: bare"):
        bare_path.report([_round(0.1, 1.1, 3.1), _round(0.1, 1.1, 3.1, bad=3)])
