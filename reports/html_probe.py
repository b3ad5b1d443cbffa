"""Open a report page in headless Chromium and measure what the browser actually laid out."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
)
CHROMIUM_TIMEOUT = 60  # seconds one Chromium run may take
VIRTUAL_TIME = 3000  # milliseconds of page time before the DOM is dumped

#: Appended to a copy of the page: each scenario's SVG size, marks and lanes as laid out.
PROBE = """<script>
const out = [...document.querySelectorAll('section.scenario')].map(s => {
  const svg = s.querySelector('svg.timeline');
  const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
  return {id: s.id, verdict: s.dataset.verdict, svgWidth: box.width, svgHeight: box.height,
          marks: svg ? svg.querySelectorAll('g.mark').length : 0,
          lanes: svg ? svg.querySelectorAll('g.lane').length : 0};
});
const probe = document.createElement('pre');
probe.textContent = 'PRO' + 'BE' + JSON.stringify(out) + 'EBO' + 'RP';
document.body.appendChild(probe);
</script>"""
_RESULT = re.compile(r"PROBE(.*?)EBORP", re.DOTALL)


class ProbeError(Exception):
    """Chromium is missing, failed, or the page produced no measurements."""


def chromium_binary() -> str | None:
    """Return the Chromium executable (Debian: ``chromium``), or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _run(binary: str, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, *FLAGS, f"--user-data-dir={home / 'profile'}", *args],
        capture_output=True,
        text=True,
        timeout=CHROMIUM_TIMEOUT,
        check=False,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
    )


def probe_report(html: str) -> list[dict[str, Any]]:
    """Return, per scenario section, the laid-out size of its SVG and its marks and lanes."""
    binary = chromium_binary()
    if binary is None:
        raise ProbeError("chromium is not installed")
    with tempfile.TemporaryDirectory(prefix="onejob-probe-") as tmp:
        home = Path(tmp)
        page = home / "probe.html"
        page.write_text(html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
        done = _run(
            binary, home, f"--virtual-time-budget={VIRTUAL_TIME}", "--dump-dom", page.as_uri()
        )
    found = _RESULT.search(done.stdout)
    if not found:
        raise ProbeError(f"no measurements from Chromium: {done.stderr[-500:]}")
    sections: list[dict[str, Any]] = json.loads(found.group(1))
    return sections


def screenshot(html_path: Path, png_path: Path, width: int = 1024, height: int = 1400) -> Path:
    """Write a PNG screenshot of a report page and return its path."""
    binary = chromium_binary()
    if binary is None:
        raise ProbeError("chromium is not installed")
    with tempfile.TemporaryDirectory(prefix="onejob-shot-") as tmp:
        done = _run(
            binary,
            Path(tmp),
            f"--screenshot={png_path}",
            f"--window-size={width},{height}",
            html_path.resolve().as_uri(),
        )
    if not png_path.exists():
        raise ProbeError(f"no screenshot from Chromium: {done.stderr[-500:]}")
    return png_path
