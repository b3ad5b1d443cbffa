"""Fixtures for the database fault tests: PostgreSQL behind a relay that can go silent."""

from __future__ import annotations

import sys
from pathlib import Path

# Helpers live beside the tests; under --import-mode=importlib they need this path.
sys.path.insert(0, str(Path(__file__).parent))

from collections.abc import AsyncIterator

import pytest
from fault_relay import FaultRelay
from sqlalchemy.engine import make_url


@pytest.fixture
def pg_url(database_url: str) -> str:
    """A fresh migrated PostgreSQL database (these faults are PostgreSQL's network)."""
    if not database_url.startswith("postgresql"):
        pytest.skip("a network between the gateway and its database is PostgreSQL's")
    return database_url


@pytest.fixture
async def relay(pg_url: str) -> AsyncIterator[FaultRelay]:
    """A relay in front of the test database's server."""
    url = make_url(pg_url)
    relay = FaultRelay(url.host or "127.0.0.1", url.port or 5432)
    await relay.start()
    try:
        yield relay
    finally:
        await relay.close()


@pytest.fixture
def relayed_url(pg_url: str, relay: FaultRelay) -> str:
    """The test database's URL, through the relay."""
    url = make_url(pg_url).set(host="127.0.0.1", port=relay.port)
    return url.render_as_string(hide_password=False)
