"""Open the HTML report in headless Chromium: every scenario and its SVG must render."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from reports.scenario_reports import html
from scenarios.model import RunReport

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--disable-dev-shm-usage"]
CHROMIUM_TIMEOUT = 60  # seconds

#: Appended to a copy of the page: measures each scenario's SVG as the browser laid it out.
PROBE = """<script>
const out = [...document.querySelectorAll('section.scenario')].map(s => {
  const svg = s.querySelector('svg.timeline');
  const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
  return {id: s.id, verdict: s.dataset.verdict, svgWidth: box.width, svgHeight: box.height,
          marks: svg ? svg.querySelectorAll('g.mark').length : 0,
          lanes: svg ? svg.querySelectorAll('g.lane').length : 0};
});
const probe = document.createElement('pre');
probe.id = 'probe';
probe.textContent = 'PRO' + 'BE' + JSON.stringify(out) + 'EBO' + 'RP';
document.body.appendChild(probe);
</script>"""

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")


def run_chromium(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium with a private profile."""
    assert CHROMIUM is not None
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={home / 'profile'}", *args],
        capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT, check=False,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
    )


def test_every_scenario_and_its_svg_render_in_chromium(
    tmp_path: Path, mixed_report: RunReport
) -> None:
    page = tmp_path / "probe.html"
    page.write_text(html(mixed_report).replace("</body>", PROBE + "</body>"))
    done = run_chromium("--virtual-time-budget=3000", "--dump-dom", page.as_uri(), home=tmp_path)
    found = re.search(r"PROBE(.*?)EBORP", done.stdout, re.DOTALL)
    assert found, f"no probe output; stderr: {done.stderr[-800:]}"
    sections = json.loads(found.group(1))
    assert [s["id"] for s in sections] == [r.name for r in mixed_report.results]
    for s in sections:
        assert s["svgWidth"] > 500 and s["svgHeight"] > 100, s
        assert s["lanes"] == 5 and s["marks"] >= 11, s


def test_the_report_screenshot_is_written(tmp_path: Path, mixed_report: RunReport) -> None:
    page = tmp_path / "scenarios.html"
    page.write_text(html(mixed_report))
    shot = tmp_path / "scenarios.png"
    done = run_chromium(f"--screenshot={shot}", "--window-size=1024,1400", page.as_uri(),
                        home=tmp_path)
    assert shot.exists(), done.stderr[-800:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 20_000  # a blank page is a few kB
