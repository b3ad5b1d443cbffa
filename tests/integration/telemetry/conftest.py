"""Fixtures of the tracing tests: the dispatcher's harness, a simulator, API keys, and a
loopback OTLP receiver the gateway exports to (``OTEL_*`` set for this test only)."""

from __future__ import annotations

import sys
from pathlib import Path

# Helpers live beside the tests (and the dispatcher's); importlib mode needs the paths.
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "dispatch"))

from collections.abc import Iterator

import pytest
from otlp_receiver import SERVICE, Receiver, otlp_receiver
from shared_fixtures import keys, sim  # noqa: F401 (fixtures: the dispatcher's tests')


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
