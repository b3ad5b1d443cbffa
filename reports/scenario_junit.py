"""Scenario results as JUnit XML, one ``<testcase>`` per scenario, for CI test tabs."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from scenarios.model import RunReport, Verdict

SUITE_NAME = "onejob.scenarios"


def junit_xml(report: RunReport) -> str:
    """Return the run as a JUnit XML document (FAIL → failure, ERROR → error, SKIP → skipped)."""
    counts = report.counts()
    suite = ET.Element("testsuite", {
        "name": f"{SUITE_NAME}.{report.database}",
        "tests": str(len(report.results)),
        "failures": str(counts[Verdict.FAIL.value]),
        "errors": str(counts[Verdict.ERROR.value]),
        "skipped": str(counts[Verdict.SKIP.value]),
        "time": f"{report.duration:.3f}",
        "timestamp": report.started_at,
    })
    for r in report.results:
        case = ET.SubElement(suite, "testcase", {
            "classname": f"{SUITE_NAME}.{report.database}",
            "name": r.name,
            "time": f"{r.duration:.3f}",
        })
        checks = "\n".join(f"{'ok ' if c.ok else 'NOT'} {c.what} {c.detail}".rstrip()
                           for c in r.checks)
        if r.verdict is Verdict.FAIL:
            ET.SubElement(case, "failure", {"message": r.reason[:500], "type": "ScenarioFailure"}
                          ).text = checks
        elif r.verdict is Verdict.ERROR:
            ET.SubElement(case, "error", {"message": r.reason[:500], "type": "ScenarioError"}
                          ).text = "\n".join(r.notes)
        elif r.verdict is Verdict.SKIP:
            ET.SubElement(case, "skipped", {"message": r.reason[:500]})
        ET.SubElement(case, "system-out").text = checks
    root = ET.Element("testsuites", {"name": SUITE_NAME})
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
