"""Pytest plugin for the contract suite: ``pytest tests/contract_suite --onejob-mode replay``.

Options: ``--onejob-mode``, ``--onejob-repeats`` and ``--onejob-seed``, the seed the
variants are drawn with. Without it every session draws a fresh seed, printed in the
header so a failure can be run again exactly; under pytest-xdist the controller hands its
seed to every worker, so all of them collect the same variants.
"""

from __future__ import annotations

import pytest

from certify.results import Mode
from certify.runner import DEFAULT_REPEATS, new_run_id

SEED = pytest.StashKey[str]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--onejob-mode``, ``--onejob-repeats`` and ``--onejob-seed``."""
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
    group.addoption(
        "--onejob-seed",
        default=None,
        help="seed the variants are drawn with (default: a fresh one, shown in the header)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Fix the session's seed: the option, the xdist controller's, or a fresh one."""
    given = config.getoption("--onejob-seed", None)
    handed = getattr(config, "workerinput", {}).get("onejob_seed")
    config.stash[SEED] = given or handed or new_run_id().replace("cert-", "suite-")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: object) -> None:
    """Hand the controller's seed to an xdist worker (they must collect the same tests)."""
    config = getattr(node, "config")  # noqa: B009 - xdist's WorkerController, untyped here
    getattr(node, "workerinput")["onejob_seed"] = config.stash[SEED]  # noqa: B009


def pytest_report_header(config: pytest.Config) -> str:
    """Name the seed, so a failing variant can be drawn again."""
    seed = config.stash.get(SEED, "")
    return f"onejob variants seed: {seed} (again: --onejob-seed {seed})"


def session_seed(config: pytest.Config) -> str:
    """Return the seed of this session (for parametrizing at collection)."""
    return config.stash[SEED]


@pytest.fixture
def onejob_mode(request: pytest.FixtureRequest) -> Mode:
    """Return the mode the suite runs in."""
    return Mode(request.config.getoption("--onejob-mode"))


@pytest.fixture
def onejob_repeats(request: pytest.FixtureRequest) -> int:
    """Return k for pass^k."""
    return int(request.config.getoption("--onejob-repeats"))


@pytest.fixture
def onejob_seed(request: pytest.FixtureRequest) -> str:
    """Return the seed the session's variants are drawn with."""
    return session_seed(request.config)
