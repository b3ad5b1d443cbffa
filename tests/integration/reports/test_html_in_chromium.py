"""Open the HTML report in headless Chromium: every scenario and its SVG must render."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reports.html_probe import chromium_binary, probe_report, screenshot
from reports.scenario_reports import html
from scenarios.model import RunReport

pytestmark = pytest.mark.skipif(chromium_binary() is None, reason="chromium is not installed")


def test_every_scenario_and_its_svg_render_in_chromium(mixed_report: RunReport) -> None:
    sections = probe_report(html(mixed_report))
    assert [s["id"] for s in sections] == [r.name for r in mixed_report.results]
    assert [s["verdict"] for s in sections] == ["PASS", "FAIL", "ERROR", "SKIP"]
    for s in sections:
        assert s["svgWidth"] > 500 and s["svgHeight"] > 100, s
        assert s["lanes"] == 5 and s["marks"] >= 11, s


def test_a_page_without_the_timelines_is_caught(mixed_report: RunReport) -> None:
    broken = html(mixed_report).replace('class="timeline"', 'class="not-a-timeline"')
    sections = probe_report(broken)
    assert all(s["svgWidth"] == 0 and s["marks"] == 0 for s in sections)


def test_the_report_screenshot_is_written(tmp_path: Path, mixed_report: RunReport) -> None:
    page = tmp_path / "scenarios.html"
    page.write_text(html(mixed_report))
    shot = screenshot(page, tmp_path / "scenarios.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 20_000  # a blank page is a few kB


async def test_the_scenario_report_fits_a_phone_with_readable_timelines(
    tmp_path: Path, mixed_report: RunReport, on_a_phone: Any
) -> None:
    page = tmp_path / "scenarios.html"
    page.write_text(html(mixed_report))
    found = await on_a_phone(page, "scenarios")
    # The page was laid out 980 px wide and shrunk: tables ran off the screen, the
    # timelines' text was drawn a few pixels high.
    assert found == {"width": 390, "wide": 0, "small": 0, "cut": 0}, found
