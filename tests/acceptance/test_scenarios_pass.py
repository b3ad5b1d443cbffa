"""Every scenario passes against real gateway, simulator and nginx processes."""

from __future__ import annotations

from typing import Any

import pytest

from scenarios.catalog import ORDER

pytestmark = pytest.mark.slow

Run = tuple[int, str, dict[str, Any]]


def verdicts(run: Run) -> dict[str, tuple[str, str]]:
    """Return scenario -> (verdict, reason)."""
    return {r["name"]: (r["verdict"], r["reason"]) for r in run[2]["results"]}


@pytest.mark.parametrize("name", ORDER)
def test_scenario_passes_on_sqlite(sqlite_run: Run, name: str) -> None:
    verdict, reason = verdicts(sqlite_run)[name]
    assert verdict == "PASS", reason


@pytest.mark.postgres
@pytest.mark.parametrize("name", ORDER)
def test_scenario_passes_on_postgres(postgres_run: Run, name: str) -> None:
    verdict, reason = verdicts(postgres_run)[name]
    assert verdict == "PASS", reason


def test_the_run_exits_zero_prints_a_summary_and_writes_every_report(sqlite_run: Run) -> None:
    code, output, report = sqlite_run
    assert code == 0, output
    assert "10 scenarios (10 PASS)" in output
    assert report["format"] == "onejob.scenarios/1" and report["passed"] is True
    for name in ORDER:
        assert any(line.startswith("[") and f" {name} " in line for line in output.splitlines())


def test_every_scenario_has_a_timeline_with_attempts_and_provider_calls(sqlite_run: Run) -> None:
    for result in sqlite_run[2]["results"]:
        lanes = {m["lane"] for m in result["timeline"]}
        assert any("attempt" in lane for lane in lanes), result["name"]
        assert any("call #" in lane for lane in lanes), result["name"]


def test_the_reverse_order_timeline_shows_the_primary_losing_after_the_hedge_won(
    sqlite_run: Run,
) -> None:
    result = next(r for r in sqlite_run[2]["results"] if r["name"] == "reverse-order-finish")
    marks = {(m["lane"], m["kind"]): m["at"] for m in result["timeline"]}
    won = marks[("attempt 2 · sim-anthropic", "won")]
    lost = marks[("attempt 1 · sim-openai", "lost")]
    sent_first = marks[("attempt 1 · sim-openai", "sent")]
    assert sent_first < won < lost
