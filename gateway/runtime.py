"""What the composition root hands its background services, and the LISTEN relay.

``gateway.app.create_app`` builds a ``Runtime`` once the store is open; every background
service (the dispatcher, the reconciler, the relay) is built from it by a factory.
Kept apart from ``app`` so the dispatcher's wiring can name it without importing the app.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from gateway.domain.ports import Certifications, ContractSpec, JobStore
from gateway.metrics import Metrics
from gateway.notify import ChangeHub, listen_postgres
from gateway.settings import Settings
from gateway.store.engine import listen_dsn

if TYPE_CHECKING:
    from gateway.service import JobService


class BackgroundService(Protocol):
    """Something that runs beside the HTTP server for the app's lifetime."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Runtime:
    """What a background service may be built from, once the store is open."""

    settings: Settings
    store: JobStore
    hub: ChangeHub
    catalog: Mapping[str, ContractSpec]
    certifications: Certifications
    service: JobService
    metrics: Metrics


#: Builds one background service from the runtime (the dispatcher is wired in here).
ServiceFactory = Callable[[Runtime], BackgroundService]


class PostgresRelay:
    """Relay ``pg_notify`` from other gateway processes into this process's hub."""

    def __init__(self, dsn: str, hub: ChangeHub) -> None:
        self._dsn = dsn
        self._hub = hub
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start listening."""
        self._task = asyncio.create_task(listen_postgres(self._dsn, self._hub, self._stop))

    async def stop(self) -> None:
        """Stop listening."""
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, 5.0)


def postgres_relay(runtime: Runtime) -> BackgroundService:
    """Build the LISTEN relay (only for a database that has LISTEN: PostgreSQL)."""
    dsn = listen_dsn(runtime.settings.database_url)
    assert dsn is not None, "the relay is only wired for a database with LISTEN"
    return PostgresRelay(dsn, runtime.hub)
