"""``contracts.html`` carries the failover decision: primary -> fallback, allowed or refused
with the registry's reason, and the model, fingerprint and expiry behind each side."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from cli import certify as certify_commands
from contracts.loader import load_catalog
from reports.html_probe import chromium_binary, screenshot

pytestmark = pytest.mark.slow
CONTRACT = "ticket-triage@1"
SHOTS = Path(__file__).resolve().parents[3] / "reports/out/contracts"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="onejob")
    certify_commands.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(list(argv))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Certify a faithful primary, a faithful fallback and a drifting one, live on --sim."""
    root = tmp_path_factory.mktemp("certify")
    args = parse(
        "certify", "--sim", "--repeats", "1", "--variants", "0", "--contract", CONTRACT,
        "--provider", "faithful", "--provider", "faithful-claude", "--provider", "drifting",
        "--registry", str(root / "certs.json"), "--report-dir", str(root / "out"),
    )  # fmt: skip
    code = asyncio.run(certify_commands.certify(args, io.StringIO()))
    out = root / "out"
    return {
        "code": code,
        "json": json.loads((out / "contracts.json").read_text()),
        "html": (out / "contracts.html").read_text(),
        "path": out / "contracts.html",
    }


def test_the_json_report_carries_each_pairs_decision_and_certificates(
    report: dict[str, Any],
) -> None:
    rows = {(r["primary"], r["fallback"]): r for r in report["json"]["failover"]}
    assert set(rows) == {("faithful", "faithful-claude"), ("faithful", "drifting")}
    allowed = rows[("faithful", "faithful-claude")]
    assert (allowed["allowed"], allowed["reason"]) == (True, "certified")
    fingerprint = load_catalog()[CONTRACT].fingerprint
    assert allowed["contract_fingerprint"] == fingerprint
    side = allowed["fallback_certificate"]
    assert side["model"] == "sim-claude" and side["verdict"] == "pass"
    assert side["fingerprint_current"] is True and side["expires_at"] > side["certified_at"]
    assert allowed["primary_certificate"]["model"] == "sim-gpt"
    refused = rows[("faithful", "drifting")]
    assert refused["allowed"] is False and refused["reason"] in {
        "failed",
        "disagrees with primary",
    }
    assert "drifting" in refused["detail"]


def test_the_html_report_shows_the_verdict_table_with_model_fingerprint_and_expiry(
    report: dict[str, Any],
) -> None:
    html = report["html"]
    table = html[html.index('<table id="failover">') : html.index('<h2 id="usage">')]
    allowed = re.search(r'<tr data-pair="faithful->faithful-claude".*?</tr>', table, re.S)
    refused = re.search(r'<tr data-pair="faithful->drifting".*?</tr>', table, re.S)
    assert allowed and refused, table[:2000]
    row = allowed.group(0)
    assert 'class="allowed"' in row and "<b>certified</b>" in row
    fingerprint = load_catalog()[CONTRACT].fingerprint[:12]
    for text in ("sim-gpt", "sim-claude", f"{fingerprint}…", "expires 20", "(current)"):
        assert text in row, text
    assert 'class="refused"' in refused.group(0)
    matrix = html[html.index('<h2 id="matrix">') : html.index('<h2 id="failover-pairs">')]
    assert f"<code>{fingerprint}…</code>" in matrix and "model <code>sim-claude</code>" in matrix
    assert "<script" not in html.lower()
    # It opens with the summary and the contents, then the provider x contract table; the
    # failover table (36 rows in a --sim run) comes after it.
    summary = html[html.index('<p id="summary">') : html.index("</nav>")]
    assert "3 provider(s) &times; 1 contract(s)" in summary
    assert "2 failover pair(s):\n1 allowed, 1 refused." in summary
    for anchor in ("matrix", "failover-pairs", "usage", "variants", "failures"):
        assert f'href="#{anchor}"' in summary and f'id="{anchor}"' in html, anchor
    assert html.index('id="summary"') < html.index('id="matrix"') < html.index('id="failover"')


@pytest.mark.skipif(chromium_binary() is None, reason="chromium is not installed")
def test_the_html_report_renders_in_chromium(report: dict[str, Any]) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    png = screenshot(report["path"], SHOTS / "contracts-1280.png", width=1280, height=1100)
    assert png.stat().st_size > 10_000


async def test_the_html_report_fits_a_phone(report: dict[str, Any], on_a_phone: Any) -> None:
    found = await on_a_phone(report["path"], "contracts")
    assert found == {"width": 390, "wide": 0, "small": 0, "cut": 0}, found
