"""Fixtures of the tracing tests: the dispatcher's harness, a simulator, API keys, and a
loopback OTLP receiver the gateway exports to (``OTEL_*`` set for this test only)."""

from __future__ import annotations

import sys
from pathlib import Path

# Helpers live beside the tests (and the dispatcher's); importlib mode needs the paths.
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "dispatch"))

from collections.abc import AsyncIterator, Iterator

import pytest
from otlp_receiver import SERVICE, Receiver, otlp_receiver

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


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    """A receiver, and the standard variables pointing this process's exporter at it."""
    with otlp_receiver() as running:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", running.url)
        monkeypatch.setenv("OTEL_SERVICE_NAME", SERVICE)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # milliseconds
        monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
        yield running
