"""Fixtures the dispatcher's tests share with the tracing tests (each conftest imports
them): a simulator, and an owner's and an admin's API keys."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from contracts.loader import load_catalog as contract_catalog
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import open_store
from providers.simulator.server import RunningSimulator, run_simulator


@pytest.fixture
async def sim() -> AsyncIterator[RunningSimulator]:
    async with run_simulator(port=0, catalog=contract_catalog) as running:
        yield running


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
