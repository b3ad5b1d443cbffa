"""The scenario report renderers on synthetic results."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import rfc8785

from reports.scenario_junit import junit_xml
from reports.scenario_reports import html, write_reports
from reports.scenario_text import canonical_json, markdown
from reports.timeline_svg import render_timeline
from scenarios.model import MarkKind, RunReport, TimelineMark


def test_canonical_json_is_rfc8785_and_round_trips(mixed_report: RunReport) -> None:
    raw = canonical_json(mixed_report)
    doc = json.loads(raw)
    assert rfc8785.dumps(doc) == raw
    assert doc["format"] == "onejob.scenarios/1"
    assert doc["passed"] is False
    assert doc["counts"] == {"PASS": 1, "FAIL": 1, "ERROR": 1, "SKIP": 1}
    assert [r["verdict"] for r in doc["results"]] == ["PASS", "FAIL", "ERROR", "SKIP"]


def test_canonical_json_is_the_same_bytes_twice(mixed_report: RunReport) -> None:
    assert canonical_json(mixed_report) == canonical_json(mixed_report)


def test_markdown_has_a_summary_row_and_a_section_per_scenario(mixed_report: RunReport) -> None:
    text = markdown(mixed_report)
    assert "Overall: **FAIL**" in text
    for r in mixed_report.results:
        assert f"| [{r.name}](#{r.name}) |" in text
        assert f"## {r.name}: {r.verdict.value}" in text
    assert "✘ one job id" in text
    assert "| 2.610 | attempt 1 · sim-openai | lost | lost |" in text


def test_junit_maps_verdicts_to_failure_error_and_skipped(mixed_report: RunReport) -> None:
    root = ET.fromstring(junit_xml(mixed_report))
    suite = root.find("testsuite")
    assert suite is not None
    assert (
        suite.get("tests"),
        suite.get("failures"),
        suite.get("errors"),
        suite.get("skipped"),
    ) == ("4", "1", "1", "1")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["reverse-order-finish"].find("failure") is None
    failure = cases["double-click"].find("failure")
    assert failure is not None and "one job id" in (failure.get("message") or "")
    assert cases["worker-crash"].find("error") is not None
    assert cases["cross-instance-double-click"].find("skipped") is not None


def test_timeline_draws_a_lane_per_attempt_and_calls_beneath(
    reverse_timeline: list[TimelineMark],
) -> None:
    svg = render_timeline(reverse_timeline, "t")
    root = ET.fromstring(svg)
    ns = {"s": "http://www.w3.org/2000/svg"}
    lanes = [g.get("data-lane") for g in root.findall("s:g[@data-lane]", ns)]
    assert lanes == [
        "scenario",
        "attempt 1 · sim-openai",
        "attempt 2 · sim-anthropic",
        "call #1 · sim-openai",
        "call #2 · sim-anthropic",
    ]
    for kind in ("sent", "finished", "won", "lost", "call_received", "call_ended"):
        assert root.findall(f".//s:g[@class='mark mark-{kind}']", ns), kind


def test_timeline_puts_the_late_loser_right_of_the_winner(
    reverse_timeline: list[TimelineMark],
) -> None:
    root = ET.fromstring(render_timeline(reverse_timeline))
    ns = {"s": "http://www.w3.org/2000/svg"}

    def x_of(kind: str) -> float:
        mark = root.find(f".//s:g[@class='mark mark-{kind}']", ns)
        assert mark is not None
        shape = mark[1]
        if shape.tag.endswith("path"):
            return float((shape.get("d") or "M0").split()[0][1:].split(",")[0]) + 6
        xs = [float(p.split(",")[0]) for p in (shape.get("points") or "").split()]
        return sum(xs) / len(xs)

    assert x_of("lost") > x_of("won")


def test_timeline_escapes_labels_and_handles_no_marks() -> None:
    svg = render_timeline([TimelineMark(0.1, "<lane>", MarkKind.EVENT, "a & b")], "x<y")
    ET.fromstring(svg)  # well-formed despite the markup in labels
    assert "&lt;lane&gt;" in svg
    empty = render_timeline([], "nothing")
    assert "no timeline recorded" in empty
    ET.fromstring(empty)


def test_html_escapes_titles_and_embeds_one_svg_per_scenario(mixed_report: RunReport) -> None:
    page = html(mixed_report)
    assert page.count("<svg") == len(mixed_report.results)
    assert "&lt;b&gt;escaped&lt;/b&gt;" in page
    assert 'id="overall">FAIL<' in page
    assert "/v1/jobs?x=1" in page and "127.0.0.1:1" not in page.split('<table id="summary">')[1]


def test_write_reports_writes_all_four_files(tmp_path: Path, passing_report: RunReport) -> None:
    paths = write_reports(passing_report, tmp_path / "out")
    assert sorted(p.name for p in paths.values()) == [
        "scenarios.html",
        "scenarios.json",
        "scenarios.junit.xml",
        "scenarios.md",
    ]
    assert all(p.stat().st_size > 100 for p in paths.values())
    assert json.loads(paths["json"].read_bytes())["passed"] is True


def test_a_run_rebuilt_from_its_json_renders_the_same(mixed_report: RunReport) -> None:
    from scenarios.model import run_report_from_json

    rebuilt = run_report_from_json(json.loads(canonical_json(mixed_report)))
    assert canonical_json(rebuilt) == canonical_json(mixed_report)
    assert html(rebuilt) == html(mixed_report)


def test_lanes_of_a_group_are_drawn_in_the_order_they_began() -> None:
    marks = [
        TimelineMark(0.0, "scenario", MarkKind.ACTION, "start"),
        TimelineMark(5.0, "after attempt 1 · sim-openai", MarkKind.SENT, "sent"),
        TimelineMark(6.0, "after attempt 2 · sim-anthropic", MarkKind.SENT, "sent"),
        TimelineMark(1.0, "before attempt 1 · sim-openai", MarkKind.SENT, "sent"),
        TimelineMark(5.1, "after call #2 · sim-openai", MarkKind.CALL_RECEIVED, "k"),
        TimelineMark(1.1, "before call #1 · sim-openai", MarkKind.CALL_RECEIVED, "k"),
    ]
    root = ET.fromstring(render_timeline(marks, "t"))
    ns = {"s": "http://www.w3.org/2000/svg"}
    lanes = [g.get("data-lane") for g in root.findall("s:g[@data-lane]", ns)]
    # They ran in alphabetical order: "after attempt 1, after attempt 2, before attempt 1".
    assert lanes == [
        "scenario",
        "before attempt 1 · sim-openai",
        "after attempt 1 · sim-openai",
        "after attempt 2 · sim-anthropic",
        "before call #1 · sim-openai",
        "after call #2 · sim-openai",
    ]
