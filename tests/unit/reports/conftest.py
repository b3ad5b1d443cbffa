"""Fixtures of the report tests: synthetic runs built by ``report_builders``."""

from __future__ import annotations

import sys
from pathlib import Path

# The builders live beside the tests; under --import-mode=importlib they need this path.
sys.path.insert(0, str(Path(__file__).parent))

import pytest
from report_builders import mixed_report as build_mixed_report
from report_builders import passing_report as build_passing_report
from report_builders import reverse_order_timeline

from scenarios.model import RunReport, TimelineMark


@pytest.fixture
def mixed_report() -> RunReport:
    """Return a run with one PASS, one FAIL, one ERROR and one SKIP."""
    return build_mixed_report()


@pytest.fixture
def passing_report() -> RunReport:
    """Return a run where every scenario passed."""
    return build_passing_report()


@pytest.fixture
def reverse_timeline() -> list[TimelineMark]:
    """Return the reverse-order-finish timeline."""
    return reverse_order_timeline()
