"""Scenario results as JUnit XML, one ``<testcase>`` per scenario, through ``reports.junit``."""

from __future__ import annotations

from reports.junit import JunitCase, junit_document
from scenarios.model import RunReport, ScenarioResult, Verdict

SUITE_NAME = "onejob.scenarios"


def _case(r: ScenarioResult, database: str) -> JunitCase:
    checks = "\n".join(f"{'ok ' if c.ok else 'NOT'} {c.what} {c.detail}".rstrip() for c in r.checks)
    return JunitCase(
        name=r.name,
        classname=f"{SUITE_NAME}.{database}",
        time=r.duration,
        failure=r.reason if r.verdict is Verdict.FAIL else None,
        failure_text=checks,
        failure_type="ScenarioFailure",
        error=r.reason if r.verdict is Verdict.ERROR else None,
        error_text="\n".join([r.reason, *r.notes]),
        skipped=r.reason if r.verdict is Verdict.SKIP else None,
        system_out=checks,
    )


def junit_xml(report: RunReport) -> str:
    """Return the run as a JUnit XML document (FAIL → failure, ERROR → error, SKIP → skipped)."""
    cases = [_case(r, report.database) for r in report.results]
    return junit_document(f"{SUITE_NAME}.{report.database}", cases, report.started_at)
