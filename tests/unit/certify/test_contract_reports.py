"""The certification reports, from a small replay run over committed cassettes (no sockets)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from certify.results import Mode
from certify.runner import Runner
from certify.simulated import sim_providers
from cli.certify import summary_table
from contracts.loader import load_catalog
from reports.contracts_report import run_json, write_reports

CATALOG = load_catalog()
WANTED = {"injection-ignore-previous", "special-tokens-in-pasted-log"}


async def test_reports_carry_every_layer_and_report_harness_errors(tmp_path: Path) -> None:
    contract = CATALOG["ticket-triage@1"]
    good = sim_providers()["faithful"]
    # Same cassettes, a provider config whose model differs: every request mismatches.
    wrong = good.model_copy(update={"model": "other-model"})
    runner = Runner(Mode.REPLAY, repeats=2)
    run = await runner.run([contract], [good], case_filter=lambda c, case: case.id in WANTED)
    assert run.passed and run.errors == []
    doc = run_json(run)
    assert doc["certifies"] is False and doc["mode"] == "replay"
    [unit] = doc["units"]
    assert unit["verdict"] == "pass" and len(unit["cases"]) == 2
    assert set(unit["cases"][0]["layers"]) == {
        "render", "transport", "schema", "model", "semantics", "stability"
    }  # fmt: skip

    bad = await runner.run([contract], [wrong], case_filter=lambda c, case: case.id in WANTED)
    assert not bad.passed
    assert len(bad.errors) == 2
    assert all("does not match the recording at /model" in e for e in bad.errors), bad.errors
    paths = write_reports(bad, tmp_path)
    html = paths["html"].read_text()
    assert "<script" not in html.lower()
    assert "FAILED" in html and "harness" in html
    suite = ET.parse(paths["junit"]).getroot().find("testsuite")
    assert suite is not None and suite.get("errors") == "2"
    assert json.loads(paths["json"].read_text())["passed"] is False
    assert "FAIL" in summary_table(bad) and "ticket-triage@1" in summary_table(bad)
