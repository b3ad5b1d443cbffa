"""Fixtures for the dispatcher's unit tests: a dispatcher wired to fakes."""

from __future__ import annotations

import sys
from pathlib import Path

# Helpers live beside the tests; under --import-mode=importlib they need this path.
sys.path.insert(0, str(Path(__file__).parent))

from typing import Any

import pytest
from dispatch_fakes import (
    FixedCertifications,
    MakeDispatcher,
    ScriptedProvider,
    SpyStore,
    ToyContract,
    provider_config,
)

from gateway.dispatch.dispatcher import Dispatcher
from gateway.dispatch.routing import Routes
from gateway.metrics import Metrics
from gateway.notify import ChangeHub
from gateway.settings import Settings


@pytest.fixture
def store() -> SpyStore:
    return SpyStore()


@pytest.fixture
def make_dispatcher(store: SpyStore) -> MakeDispatcher:
    """Build a dispatcher over p1 (primary), p2 and p3 (fallbacks) and the toy contract."""

    def make(
        *,
        providers: dict[str, ScriptedProvider] | None = None,
        certified: tuple[tuple[str, str], ...] = (("p1", "p2"), ("p1", "p3")),
        route: dict[str, Any] | None = None,
        dispatcher: dict[str, Any] | None = None,
        contract: ToyContract | None = None,
        timeout: float = 5.0,
    ) -> Dispatcher:
        names = ("p1", "p2", "p3")
        configs = {n: provider_config(n, timeout) for n in names}
        settings = Settings.model_validate(
            {
                "providers": {n: c.model_dump() for n, c in configs.items()},
                "routes": {"*": {"primary": "p1", "fallbacks": ["p2", "p3"], **(route or {})}},
                "dispatcher": {
                    "runners": 2,
                    "lease_ttl": 0.3,
                    "poll_interval": 0.2,
                    "reap_interval": 0.1,
                    "shutdown_grace": 1.0,
                    **(dispatcher or {}),
                },
            }
        )
        toy = contract or ToyContract()
        catalog = {toy.name: toy}
        return Dispatcher(
            store=store,  # type: ignore[arg-type]
            hub=ChangeHub(),
            providers=providers or {n: ScriptedProvider(n) for n in names},
            provider_configs=configs,
            catalog=catalog,  # type: ignore[arg-type]
            routes=Routes(settings, catalog, configs, FixedCertifications(*certified)),  # type: ignore[arg-type]
            settings=settings,
            metrics=Metrics(),
            worker_id="w-test",
        )

    return make
