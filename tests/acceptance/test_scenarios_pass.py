"""Every scenario passes against real gateway, simulator and nginx processes.

One test per database runs the whole catalog through the CLI's entry point (so ``pytest -n``
never starts the same processes twice) and reports every scenario that did not pass.
"""

from __future__ import annotations

from typing import Any

import pytest

from scenarios.registry import all_scenarios, scenario_order
from scenarios.runner import RUNS_IN_THE_POSTGRESQL_RUN

ORDER = scenario_order()
#: Scenarios that build their own world around PostgreSQL: skipped in the SQLite run.
POSTGRES_RUN_ONLY = frozenset(n for n, s in all_scenarios().items() if s.postgres_run_only)

pytestmark = pytest.mark.slow

Run = tuple[int, str, dict[str, Any]]


def not_passed(run: Run, skipped: frozenset[str] = frozenset()) -> list[str]:
    """Return ``name: VERDICT reason`` for every scenario that did not pass (those in
    ``skipped`` may skip, as the run on PostgreSQL runs them)."""
    return [
        f"{r['name']}: {r['verdict']} {r['reason']}"
        for r in run[2]["results"]
        if r["verdict"] != "PASS"
        and not (
            r["name"] in skipped
            and r["verdict"] == "SKIP"
            and r["reason"] == RUNS_IN_THE_POSTGRESQL_RUN
        )
    ]


def check_run(run: Run, skipped: frozenset[str] = frozenset()) -> None:
    """Assert the run's verdicts, summary, reports and timelines."""
    code, output, report = run
    assert not not_passed(run, skipped), "\n".join(not_passed(run, skipped))
    assert code == 0, output
    passed = len(ORDER) - len(skipped)
    summary = f"{passed} PASS, {len(skipped)} SKIP" if skipped else f"{passed} PASS"
    assert f"{len(ORDER)} scenarios ({summary})" in output, output
    assert report["format"] == "onejob.scenarios/1" and report["passed"] is True
    assert [r["name"] for r in report["results"]] == list(ORDER)
    for name in ORDER:
        assert any(line.startswith("[") and f" {name} " in line for line in output.splitlines())
    for result in report["results"]:
        if result["name"] in skipped:
            continue
        lanes = {m["lane"] for m in result["timeline"]}
        assert any("attempt" in lane for lane in lanes), result["name"]
        assert any("call #" in lane for lane in lanes), result["name"]
    reverse = next(r for r in report["results"] if r["name"] == "reverse-order-finish")
    marks = {(m["lane"], m["kind"]): m["at"] for m in reverse["timeline"]}
    assert (
        marks[("attempt 1 · sim-openai", "sent")]
        < marks[("attempt 2 · sim-anthropic", "won")]
        < marks[("attempt 1 · sim-openai", "lost")]
    )


def test_every_scenario_passes_on_sqlite(sqlite_run: Run) -> None:
    check_run(sqlite_run, POSTGRES_RUN_ONLY)


@pytest.mark.postgres
def test_every_scenario_passes_on_postgresql(postgres_run: Run) -> None:
    check_run(postgres_run)


def test_the_real_runs_html_renders_every_timeline_in_chromium(sqlite_run: Run) -> None:
    from reports.html_probe import chromium_binary, probe_report
    from reports.scenario_reports import html
    from scenarios.model import run_report_from_json

    if chromium_binary() is None:
        pytest.skip("chromium is not installed")
    sections = probe_report(html(run_report_from_json(sqlite_run[2])))
    assert [s["id"] for s in sections] == list(ORDER)
    for s in sections:
        if s["id"] in POSTGRES_RUN_ONLY:
            assert s["verdict"] == "SKIP", s  # run, and drawn, in the run on PostgreSQL
            continue
        assert s["svgWidth"] > 500 and s["lanes"] >= 2 and s["marks"] >= 3, s
