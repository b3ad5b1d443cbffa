"""The pages a newcomer reads name no tracker issue ("issue 38"), no rule of the first
design by its number ("R4", "R6") and none of its words ("the seed's two buttons"): they
say what is meant. The developers' pages
(architecture, decisions, dispatcher, benchmarks) may."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
USER_PAGES = (
    "README.md",
    "clients/python/README.md",
    "clients/js/README.md",
    "examples/button/README.md",
    "docs/api.md",
    "docs/calling.md",
    "docs/configuration.md",
    "docs/console.md",
    "docs/operations.md",
    "docs/reports.md",
    "docs/scenarios.md",
    "docs/telemetry.md",
)
JARGON = re.compile(r"\b(?:issue \d+|R[1-9])\b|(?i:the seed's)")


def test_the_user_pages_name_no_issue_and_no_rule_number() -> None:
    found = [
        f"{page}:{n}: {line.strip()}"
        for page in USER_PAGES
        for n, line in enumerate((ROOT / page).read_text(encoding="utf-8").splitlines(), 1)
        if JARGON.search(line)
    ]
    assert found == [], "\n".join(found)
