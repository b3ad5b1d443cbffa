"""A second ``onejob scenarios run`` keeps the first's report: each run in its own folder,
``latest`` at the newest finished one, an index of them all."""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path

import pytest

from cli.scenarios import run_and_report
from reports.scenario_runs import finished_runs, new_run_dir
from scenarios.context import ScenarioContext
from scenarios.registry import ScenarioSpec
from scenarios.runner import RunOptions


async def _holds(ctx: ScenarioContext) -> None:
    ctx.expect(True, "it held")


async def _breaks(ctx: ScenarioContext) -> None:
    ctx.expect(False, "it broke")


@pytest.fixture
def two_scenarios(monkeypatch: pytest.MonkeyPatch) -> None:
    import scenarios.runner as runner

    specs = {
        "holds": ScenarioSpec("holds", "t", _holds, 1),
        "breaks": ScenarioSpec("breaks", "t", _breaks, 2),
    }
    monkeypatch.setattr(runner, "all_scenarios", lambda: specs)


async def test_a_second_run_keeps_the_first_runs_report(
    tmp_path: Path, two_scenarios: None
) -> None:
    first_out, second_out = io.StringIO(), io.StringIO()
    assert await run_and_report(["holds"], RunOptions(report_dir=tmp_path), first_out) == 0
    assert await run_and_report(["breaks"], RunOptions(report_dir=tmp_path), second_out) == 1

    runs = sorted((tmp_path / "runs").iterdir())
    assert len(runs) == 2  # two runs within a second get two folders
    reports = [json.loads((run / "scenarios.json").read_bytes()) for run in runs]
    assert [[r["name"] for r in doc["results"]] for doc in reports] == [["holds"], ["breaks"]]
    for run in runs:
        assert {p.name for p in run.iterdir()} >= {
            "scenarios.json",
            "scenarios.md",
            "scenarios.html",
            "scenarios.junit.xml",
        }
    latest = tmp_path / "latest"
    assert latest.is_symlink() and latest.resolve() == runs[1].resolve()
    assert str(runs[0]) in first_out.getvalue() and str(runs[1]) in second_out.getvalue()
    assert "every run: " + str(tmp_path / "index.html") in second_out.getvalue()

    index_md = (tmp_path / "index.md").read_text()
    # newest first (a run's id may be another's with -2 after it: match the whole cell)
    assert index_md.index(f"| {runs[1].name} |") < index_md.index(f"| {runs[0].name} |")
    assert "FAILED: 1 FAIL" in index_md and "passed: 1 PASS" in index_md
    index_html = (tmp_path / "index.html").read_text()
    assert f'href="runs/{runs[0].name}/scenarios.html"' in index_html
    assert f'href="runs/{runs[1].name}/scenarios.html"' in index_html


async def test_an_unknown_name_leaves_no_run_folder(tmp_path: Path, two_scenarios: None) -> None:
    out = io.StringIO()
    assert await run_and_report(["no-such"], RunOptions(report_dir=tmp_path), out) == 2
    assert list((tmp_path / "runs").iterdir()) == []
    assert not (tmp_path / "latest").exists()


def test_run_folders_are_named_for_their_start_in_utc(tmp_path: Path) -> None:
    at = dt.datetime(2026, 12, 7, 17, 24, 0, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    names = [new_run_dir(tmp_path, at).name for _ in range(3)]
    assert names == ["20261207T162400Z", "20261207T162400Z-2", "20261207T162400Z-3"]


def test_the_index_lists_only_finished_runs(tmp_path: Path) -> None:
    done, interrupted, damaged = (new_run_dir(tmp_path) for _ in range(3))
    (done / "scenarios.json").write_text('{"started_at": "2026-12-07T16:24:00Z", "passed": true}')
    (damaged / "scenarios.json").write_text("{")
    assert [run_id for run_id, _ in finished_runs(tmp_path)] == [done.name]
    assert interrupted.is_dir()
