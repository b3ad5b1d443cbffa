"""Fixtures of the Chromium report tests: the unit tests' synthetic runs."""

from __future__ import annotations

import sys
from pathlib import Path

# The synthetic runs are built beside the unit report tests; importlib mode needs the path.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "reports"))

import pytest
from report_builders import mixed_report as build_mixed_report

from scenarios.model import RunReport


@pytest.fixture
def mixed_report() -> RunReport:
    """Return a run with one PASS, one FAIL, one ERROR and one SKIP."""
    return build_mixed_report()
