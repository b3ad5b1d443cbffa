"""The shared JUnit XML writer."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from reports.junit import JunitCase, write_junit


def test_junit_counts_failures_errors_and_skips_and_escapes_text(tmp_path: Path) -> None:
    cases = [
        JunitCase("ok", "suite.a", 0.5),
        JunitCase(
            "bad", "suite.a", 0.25, failure="schema: <unexpected> key", failure_text="x\x00y"
        ),
        JunitCase("broken", "suite.b", error="cassette mismatch"),
        JunitCase("later", "suite.b", skipped="not recorded"),
    ]
    path = write_junit(tmp_path / "out" / "r.junit.xml", "onejob.test", cases)
    root = ET.parse(path).getroot()
    suite = root.find("testsuite")
    assert suite is not None
    assert (
        suite.get("tests"),
        suite.get("failures"),
        suite.get("errors"),
        suite.get("skipped"),
    ) == (
        "4",
        "1",
        "1",
        "1",
    )
    assert suite.get("time") == "0.750"
    failure = root.find(".//testcase[@name='bad']/failure")
    assert failure is not None
    assert failure.get("message") == "schema: <unexpected> key"
    assert failure.text == "x\ufffdy"
    assert root.find(".//testcase[@name='broken']/error") is not None
