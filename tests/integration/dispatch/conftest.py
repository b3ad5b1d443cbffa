"""Fixtures for the dispatcher's integration tests: simulator, certificates, API keys."""

from __future__ import annotations

import sys
from pathlib import Path

# Helpers live beside the tests; under --import-mode=importlib they need this path.
sys.path.insert(0, str(Path(__file__).parent))

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from dispatch_harness import SimControl, open_sim_control
from shared_fixtures import keys, sim  # noqa: F401 (fixtures, shared with tracing's)

from providers.simulator.server import RunningSimulator


@pytest.fixture
async def sim_control(sim: RunningSimulator) -> AsyncIterator[SimControl]:  # noqa: F811
    async with open_sim_control(sim) as control:
        yield control


@pytest.fixture
def cert_path(tmp_path: Path) -> Path:
    return tmp_path / "certifications.json"
