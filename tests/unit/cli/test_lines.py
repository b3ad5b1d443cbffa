"""Lines the commands print: a reason cut after a whole word, columns that line up
whatever the names' lengths."""

from __future__ import annotations

import io
from types import SimpleNamespace
from typing import Any

from cli.certify_output import progress_printer
from cli.scenarios import progress_line, summary_table
from reports.lines import clipped
from scenarios.model import RunReport, ScenarioResult, Verdict


def test_a_long_sentence_is_cut_after_a_whole_word_and_says_so() -> None:
    text = "nginx is not installed here, so the load-balancer scenario cannot run at all"
    assert clipped(text, 200) == text
    assert clipped(text, 40) == "nginx is not installed here, so the…"
    assert len(clipped(text, 40)) <= 40
    assert clipped("x" * 50, 10) == "x" * 9 + "…"  # one long word: cut inside it


def result(name: str, verdict: Verdict, reason: str) -> ScenarioResult:
    return ScenarioResult(name, "t", verdict, reason, 1.0, "sqlite", [], [], [])


def test_a_scenarios_reason_is_cut_at_a_word_in_the_progress_line_and_the_summary() -> None:
    why = "nginx is not installed: " + " ".join(["apt-get install nginx"] * 12)
    skipped = result("load-balancer-retry", Verdict.SKIP, why)
    line = progress_line(1, 1, skipped)
    assert line.endswith("nginx…") and "ngin…" not in line
    row = summary_table(RunReport([skipped], "t", 1.0, "sqlite")).splitlines()[2]
    assert row.endswith("…") and row.rstrip("…").endswith(("apt-get", "install", "nginx"))


def unit(provider: str, contract: str, reason: str | None) -> Any:
    fails = [{"case": "c1", "layer": "schema", "reason": reason}] if reason else []
    return SimpleNamespace(
        provider=SimpleNamespace(name=provider),
        contract=SimpleNamespace(name=contract),
        passed=not fails,
        failures=lambda: fails,
        stability_note=lambda: None,
        variants=[],
        cases=[SimpleNamespace(passed=not fails)],
        usage_summary=lambda: SimpleNamespace(brief=lambda: "p95 0.1 s"),
    )


def test_certifys_progress_lines_line_up_for_long_provider_names() -> None:
    out = io.StringIO()
    pairs = [("catalog-only-claude", "ticket-triage@1"), ("faithful", "x@1")]
    show = progress_printer(out, 12, 12, widths=(19, 15))
    for provider, contract in pairs:
        show(SimpleNamespace(unit=unit(provider, contract, "the field summary is missing " * 9)))
    lines = out.getvalue().splitlines()
    verdict_at = {line.index(" FAIL ") for line in lines}
    assert len(verdict_at) == 1, lines  # the verdict column lines up
    assert lines[0].startswith("[ 1/12] catalog-only-claude ")
    for line in lines:  # the reason is cut after a whole word
        assert line.endswith("…") and line[:-1].split()[-1] in {
            "the",
            "field",
            "summary",
            "is",
            "missing",
        }, line
