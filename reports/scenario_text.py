"""Scenario results as canonical JSON (RFC 8785) and as Markdown."""

from __future__ import annotations

import rfc8785

from scenarios.model import RunReport, ScenarioResult, Verdict

VERDICT_ICONS = {Verdict.PASS: "✅", Verdict.FAIL: "❌", Verdict.ERROR: "💥", Verdict.SKIP: "⏭️"}
MAX_MD_MARKS = 40  # timeline rows per scenario in the Markdown report


def canonical_json(report: RunReport) -> bytes:
    """Return the run as RFC 8785 canonical JSON (stable bytes for diffs and hashes)."""
    return rfc8785.dumps(report.as_json())


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(report: RunReport) -> str:
    """Return the run as Markdown: a summary table, then each scenario's checks and timeline."""
    counts = ", ".join(f"{n} {v}" for v, n in report.counts().items() if n)
    lines = [
        "# onejob scenarios",
        "",
        f"{len(report.results)} scenarios ({counts}) on {report.database}, "
        f"{report.duration:.1f} s, started {report.started_at}. "
        f"Overall: **{'PASS' if report.passed else 'FAIL'}**.",
        "",
        "| scenario | verdict | seconds | reason |",
        "|---|---|---:|---|",
    ]
    for r in report.results:
        lines.append(
            f"| [{r.name}](#{r.name}) | {VERDICT_ICONS[r.verdict]} {r.verdict.value} | "
            f"{r.duration:.1f} | {_cell(r.reason.splitlines()[0] if r.reason else '')} |"
        )
    for r in report.results:
        lines += ["", *_section(r)]
    return "\n".join(lines) + "\n"


def _section(r: ScenarioResult) -> list[str]:
    lines = [
        f'<a id="{r.name}"></a>',
        f"## {r.name}: {r.verdict.value}",
        "",
        f"*{r.title}* — {r.database}, {r.duration:.1f} s",
        "",
    ]
    if r.reason:
        lines += [f"> {_cell(r.reason)}", ""]
    if r.checks:
        lines += ["**Checks**", ""]
        lines += [
            f"- {'✔' if c.ok else '✘'} {c.what}" + (f" — {c.detail}" if c.detail else "")
            for c in r.checks
        ]
        lines.append("")
    if r.timeline:
        lines += [
            f"**Timeline** (from {r.timeline_source})",
            "",
            "| t (s) | lane | mark | detail |",
            "|---:|---|---|---|",
        ]
        for m in r.timeline[:MAX_MD_MARKS]:
            lines.append(f"| {m.at:.3f} | {_cell(m.lane)} | {m.kind.value} | {_cell(m.label)} |")
        if len(r.timeline) > MAX_MD_MARKS:
            lines.append(f"| … | {len(r.timeline) - MAX_MD_MARKS} more in scenarios.json | | |")
        lines.append("")
    lines.append(f"HTTP exchanges: {len(r.exchanges)} (see scenarios.html)")
    for note in r.notes:
        first = note.strip().splitlines()[0] if note.strip() else ""
        lines.append(f"- note: {_cell(first)}")
    return lines
