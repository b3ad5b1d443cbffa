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

from contracts.loader import load_catalog as contract_catalog
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import open_store
from providers.simulator.server import RunningSimulator, run_simulator


@pytest.fixture
async def sim() -> AsyncIterator[RunningSimulator]:
    async with run_simulator(port=0, catalog=contract_catalog) as running:
        yield running


@pytest.fixture
async def sim_control(sim: RunningSimulator) -> AsyncIterator[SimControl]:
    async with open_sim_control(sim) as control:
        yield control


@pytest.fixture
def cert_path(tmp_path: Path) -> Path:
    return tmp_path / "certifications.json"


@pytest.fixture
async def keys(database_url: str) -> tuple[str, str]:
    """Create an owner's key and an admin key; return ``(key, admin_key)``."""
    store = await open_store(
        database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        _, key = await store.create_api_key("alice", frozenset({"jobs"}))
        _, admin = await store.create_api_key("ops", frozenset({"jobs", "admin"}))
    finally:
        await store.close()
    return key, admin
