"""Write a scenario run in every published format: JSON, Markdown, HTML, JUnit XML."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import jinja2

from reports.scenario_junit import junit_xml
from reports.scenario_text import canonical_json, markdown
from reports.timeline_svg import render_timeline
from scenarios.model import RunReport

TEMPLATES = Path(__file__).parent / "templates"
MAX_HTML_EXCHANGES = 80  # rows of HTTP exchanges shown per scenario


def _path_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def html(report: RunReport) -> str:
    """Return the run as one self-contained HTML page with an SVG timeline per scenario."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
    )
    env.filters["path_of"] = _path_of
    svgs = {r.name: render_timeline(r.timeline, f"{r.name} timeline") for r in report.results}
    template = env.get_template("scenarios.html.j2")
    return template.render(report=report, svgs=svgs, max_exchanges=MAX_HTML_EXCHANGES)


def write_reports(report: RunReport, out_dir: Path) -> dict[str, Path]:
    """Write ``scenarios.{json,md,html,junit.xml}`` into ``out_dir``; return format -> path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out_dir / "scenarios.json",
        "md": out_dir / "scenarios.md",
        "html": out_dir / "scenarios.html",
        "junit": out_dir / "scenarios.junit.xml",
    }
    paths["json"].write_bytes(canonical_json(report))
    paths["md"].write_text(markdown(report), encoding="utf-8")
    paths["html"].write_text(html(report), encoding="utf-8")
    paths["junit"].write_text(junit_xml(report), encoding="utf-8")
    return paths
