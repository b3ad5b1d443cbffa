"""Scenarios report FAIL, with the reason, against a gateway that breaks the promise."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("name", "check", "reason"),
    [
        (
            "double-click",
            "2 clicks: one job id",
            "2 clicks: one job id: ids ['job_broken0001', 'job_broken0002']",
        ),
        (
            "divergent-key",
            "the divergent POST is 409 Conflict",
            "the divergent POST is 409 Conflict: status 201",
        ),
    ],
)
def test_scenario_fails_against_a_gateway_without_the_unique_constraint(
    run_broken: Any, name: str, check: str, reason: str
) -> None:
    code, output, report = run_broken(name)
    assert code == 1, output
    result = report["results"][0]
    assert result["verdict"] == "FAIL", result["reason"]
    assert result["reason"].startswith(reason), result["reason"]
    assert f"{name}" in output and "FAIL" in output
    failed = [c for c in result["checks"] if not c["ok"]]
    assert [c["what"] for c in failed] == [check]
