"""Fixtures of the Chromium report tests: the unit tests' synthetic runs."""

from __future__ import annotations

import sys
from pathlib import Path

# The synthetic runs are built beside the unit report tests; importlib mode needs the path.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "reports"))

from typing import Any

import pytest
from report_builders import mixed_report as build_mixed_report

from reports.html_probe import chromium_binary
from scenarios.model import RunReport

SHOTS = Path(__file__).resolve().parents[3] / "reports/out/reports"


@pytest.fixture
def mixed_report() -> RunReport:
    """Return a run with one PASS, one FAIL, one ERROR and one SKIP."""
    return build_mixed_report()


#: What a phone-sized page must not do: be wider than the screen (a table or a figure may
#: scroll inside its own frame), or draw text smaller than this many pixels.
MIN_TEXT_PX = 10
LAYOUT = """() => {
  const wide = document.documentElement.scrollWidth - window.innerWidth;
  const small = [...document.querySelectorAll('svg.timeline text')]
    .map((t) => t.getBoundingClientRect().height)
    .filter((h) => h > 0 && h < MIN_TEXT_PX);
  const cut = [...document.querySelectorAll('table')]
    .filter((t) => !t.closest('.wide, figure, details:not([open])'))
    .filter((t) => t.getBoundingClientRect().right > window.innerWidth + 1).length;
  return {width: window.innerWidth, wide, small: small.length, cut};
}""".replace("MIN_TEXT_PX", str(MIN_TEXT_PX))


@pytest.fixture
def on_a_phone() -> Any:
    """Return ``look(path, name)``: open a report file at 390 px in Chromium, screenshot it
    to reports/out/reports/NAME-390.png, and return what does not fit (see ``LAYOUT``)."""
    if chromium_binary() is None:
        pytest.skip("chromium is not installed")

    async def look(path: Path, name: str) -> dict[str, int]:
        from playwright.async_api import async_playwright

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=chromium_binary(), args=["--no-sandbox", "--disable-gpu"]
            )
            try:
                # A phone: without a viewport meta tag it lays the page out 980 px wide.
                page = await browser.new_page(
                    viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
                )
                await page.goto(path.as_uri())
                SHOTS.mkdir(parents=True, exist_ok=True)
                await page.screenshot(path=str(SHOTS / f"{name}-390.png"), full_page=True)
                found: dict[str, int] = await page.evaluate(LAYOUT)
                return found
            finally:
                await browser.close()

    return look
