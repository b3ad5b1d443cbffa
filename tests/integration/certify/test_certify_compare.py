"""``onejob certify --compare``: the changes in the printed summary, the HTML and JUnit."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from cli.certify import certify

from .conftest import parse


async def test_certify_compare_prints_html_and_junit_the_changes(tmp_path: Path) -> None:
    def args(*extra: str) -> Any:
        return parse(
            "certify", "--sim", "--mode", "replay", "--provider", "faithful",
            "--contract", "ticket-triage@1", "--seed", "seed-a",
            "--registry", str(tmp_path / "c.json"), *extra,
        )  # fmt: skip

    assert await certify(args("--report-dir", str(tmp_path / "a")), io.StringIO()) == 0
    previous = tmp_path / "a" / "contracts.json"
    doc = json.loads(previous.read_text())
    doc["units"][0]["cases"][0]["agree"]["category"] = "other"  # as if it had drifted
    doc["units"][0]["variant_cases"][0]["passed"] = False
    previous.write_text(json.dumps(doc))
    out = io.StringIO()
    assert (
        await certify(args("--report-dir", str(tmp_path / "b"), "--compare", str(previous)), out)
        == 0
    )  # a comparison never changes the exit code
    said = out.getvalue()
    first = doc["units"][0]["cases"][0]["case"]
    assert f"changes since {previous}: 2 over 1 unit(s)" in said
    assert f"faithful ticket-triage@1 {first}: values changed: category: 'other' -> " in said
    assert "passes now" in said
    html = (tmp_path / "b" / "contracts.html").read_text()
    assert "Changes since" in html and "values changed" in html
    suite = ET.parse(tmp_path / "b" / "contracts.junit.xml").getroot().find("testsuite")
    assert suite is not None
    changes = [c for c in suite.iter("testcase") if ".changes." in str(c.get("classname"))]
    assert [c.find("failure") is not None for c in changes] == [True, False]
    assert json.loads((tmp_path / "b" / "contracts.json").read_text())["comparison"]["units"] == 1
