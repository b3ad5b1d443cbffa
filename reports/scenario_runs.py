"""Each ``onejob scenarios run`` in a folder of its own, so a run never replaces another's.

Under the report folder (``reports/out/scenarios`` unless ``--report-dir`` says otherwise)::

    runs/20261207T162400Z/   one run: scenarios.{json,md,html,junit.xml}, logs/, work/
    runs/20261207T163015Z/   the next run (a second run in the same second gets a -2)
    latest -> runs/20261207T163015Z   the newest run that finished
    index.html, index.md     every finished run, newest first, with its verdicts
"""

from __future__ import annotations

import datetime as dt
import html
import itertools
import json
import os
from pathlib import Path
from typing import Any

RUNS = "runs"  #: the folder of the runs' folders
LATEST = "latest"  #: the link to the newest finished run
REPORT = "scenarios.json"  #: a finished run's machine report (an interrupted run has none)
RUN_ID_FORMAT = "%Y%m%dT%H%M%SZ"  # a run's id: when it started, UTC


def new_run_dir(report_dir: Path, now: dt.datetime | None = None) -> Path:
    """Make and return a new run's folder, named for when it started (UTC)."""
    stamp = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).strftime(RUN_ID_FORMAT)
    runs = report_dir / RUNS
    runs.mkdir(parents=True, exist_ok=True)
    for n in itertools.count(1):
        run_dir = runs / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            run_dir.mkdir()
        except FileExistsError:
            continue  # another run started in the same second
        return run_dir
    raise AssertionError("unreachable")


def publish(report_dir: Path, run_dir: Path) -> dict[str, Path]:
    """Point ``latest`` at ``run_dir`` and rewrite the index; return what was written."""
    link = report_dir / LATEST
    staged = report_dir / f".{LATEST}.{run_dir.name}"
    staged.unlink(missing_ok=True)
    staged.symlink_to(Path(RUNS) / run_dir.name, target_is_directory=True)
    os.replace(staged, link)  # readers see the old run or the new one, never neither
    runs = finished_runs(report_dir)
    paths = {"latest": link, "index_md": report_dir / "index.md"}
    paths["index_html"] = report_dir / "index.html"
    paths["index_md"].write_text(index_markdown(runs), encoding="utf-8")
    paths["index_html"].write_text(index_html(runs), encoding="utf-8")
    return paths


def finished_runs(report_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """Return each finished run's id and report summary, newest first."""
    found = []
    runs = report_dir / RUNS
    for run_dir in runs.iterdir() if runs.is_dir() else []:
        report = run_dir / REPORT
        if not report.is_file():
            continue
        try:
            doc = json.loads(report.read_bytes())
        except ValueError:
            continue  # a run being written right now, or a damaged one: not listed
        found.append((run_dir.name, doc))
    return sorted(found, key=lambda run: (run[1].get("started_at", ""), run[0]), reverse=True)


def _counts(doc: dict[str, Any]) -> str:
    counts = doc.get("counts") or {}
    return ", ".join(f"{n} {verdict}" for verdict, n in counts.items() if n) or "no scenarios"


def index_markdown(runs: list[tuple[str, dict[str, Any]]]) -> str:
    """Return the runs as a Markdown table, newest first."""
    lines = [
        "# Scenario runs",
        "",
        "| run | started (UTC) | database | verdicts | seconds | report |",
        "|---|---|---|---|---|---|",
    ]
    for run_id, doc in runs:
        lines.append(
            f"| {run_id} | {doc.get('started_at', '')} | {doc.get('database', '')} "
            f"| {'passed' if doc.get('passed') else 'FAILED'}: {_counts(doc)} "
            f"| {float(doc.get('duration', 0)):.1f} | [{RUNS}/{run_id}/scenarios.md]"
            f"({RUNS}/{run_id}/scenarios.md) |"
        )
    return "\n".join(lines) + "\n"


def index_html(runs: list[tuple[str, dict[str, Any]]]) -> str:
    """Return the runs as one small self-contained HTML page, newest first."""
    rows = []
    for run_id, doc in runs:
        verdict = "passed" if doc.get("passed") else "FAILED"
        cells = [
            f'<a href="{RUNS}/{html.escape(run_id)}/scenarios.html">{html.escape(run_id)}</a>',
            html.escape(str(doc.get("started_at", ""))),
            html.escape(str(doc.get("database", ""))),
            f'<span class="{verdict.lower()}">{verdict}</span>: {html.escape(_counts(doc))}',
            f"{float(doc.get('duration', 0)):.1f}",
        ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    body = "\n".join(rows) or '<tr><td colspan="5">No finished run yet.</td></tr>'
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>onejob scenario runs</title>
<style>
body {{ font: 15px/1.45 system-ui, sans-serif; margin: 1rem; color: #1b1f24; }}
table {{ border-collapse: collapse; width: 100%; }}
th, td {{ text-align: left; padding: .35rem .5rem; border-bottom: 1px solid #d0d7de; }}
.failed {{ color: #b42318; font-weight: 600; }} .passed {{ color: #1a7f37; }}
@media (max-width: 600px) {{ th:nth-child(2), td:nth-child(2),
  th:nth-child(5), td:nth-child(5) {{ display: none; }} }}
</style>
</head>
<body>
<h1>Scenario runs</h1>
<p>Newest first; <a href="{LATEST}/scenarios.html">{LATEST}</a> is the newest.</p>
<table>
<thead><tr><th>run</th><th>started (UTC)</th><th>database</th><th>verdicts</th>\
<th>seconds</th></tr></thead>
<tbody>
{body}
</tbody>
</table>
</body>
</html>
"""
