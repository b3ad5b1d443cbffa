"""Pytest plugin for the contract suite: ``pytest tests/contract_suite --onejob-mode replay``."""

from __future__ import annotations

import pytest

from certify.results import Mode
from certify.runner import DEFAULT_REPEATS


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--onejob-mode`` and ``--onejob-repeats``."""
    group = parser.getgroup("onejob contracts")
    group.addoption(
        "--onejob-mode",
        choices=[m.value for m in Mode],
        default=Mode.REPLAY.value,
        help="replay: committed cassettes (default); live/record: an in-process simulator",
    )
    group.addoption(
        "--onejob-repeats",
        type=int,
        default=DEFAULT_REPEATS,
        help="k repeats per case for the stability layer (pass^k)",
    )


@pytest.fixture
def onejob_mode(request: pytest.FixtureRequest) -> Mode:
    """Return the mode the suite runs in."""
    return Mode(request.config.getoption("--onejob-mode"))


@pytest.fixture
def onejob_repeats(request: pytest.FixtureRequest) -> int:
    """Return k for pass^k."""
    return int(request.config.getoption("--onejob-repeats"))
