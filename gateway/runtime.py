"""What the composition root hands its background services, and the LISTEN relay.

``gateway.app.create_app`` builds a ``Runtime`` once the store is open; every background
service (the dispatcher, the reconciler, the relay) is built from it by a factory.
Kept apart from ``app`` so the dispatcher's wiring can name it without importing the app.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import sniffio

from gateway.domain.ports import Certifications, ContractSpec, JobStore
from gateway.metrics import Metrics
from gateway.notify import ChangeHub, RelayState, listen_postgres
from gateway.settings import Settings
from gateway.store.engine import is_sqlite
from gateway.store.pg_connections import PostgresConnector

if TYPE_CHECKING:
    from gateway.service import JobService

log = logging.getLogger("onejob.runtime")


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

    def __init__(self, connector: PostgresConnector, hub: ChangeHub, metrics: Metrics) -> None:
        self._connector = connector
        self._hub = hub
        self._metrics = metrics
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.state = RelayState()

    async def start(self) -> None:
        """Start listening."""
        self._hub.relay = self.state
        self._task = asyncio.create_task(
            listen_postgres(self._connector.connect, self._hub, self._stop, self.state)
        )
        self._metrics.watch_relay(self.state)

    async def stop(self) -> None:
        """Stop listening."""
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, 5.0)


def postgres_relay(runtime: Runtime) -> BackgroundService:
    """Build the LISTEN relay (only for a database that has LISTEN: PostgreSQL)."""
    settings = runtime.settings
    connector = PostgresConnector(settings.database_url, settings.database)
    return PostgresRelay(connector, runtime.hub, runtime.metrics)


def default_background(
    settings: Settings, metrics: Metrics, *, dispatcher: bool | None = None
) -> list[ServiceFactory]:
    """Return the background services a process runs: the LISTEN relay, the dispatcher
    (with the reconciler beside it) unless ``dispatcher`` (default: the settings) says no."""
    factories: list[ServiceFactory] = []
    if not is_sqlite(settings.database_url):  # LISTEN is PostgreSQL's
        factories.append(postgres_relay)
    if settings.dispatcher.enabled if dispatcher is None else dispatcher:
        from gateway.dispatch.wiring import dispatcher_factory

        factories.append(dispatcher_factory(metrics))
    return factories


def _default_catalog() -> Mapping[str, ContractSpec]:
    from contracts.loader import load_catalog

    return load_catalog()


def _default_certifications(settings: Settings) -> Certifications:
    from contracts.registry import CertificationRegistry

    return CertificationRegistry(settings.certifications_path)


class _Named(threading.local):
    """Per thread: how many runtimes named asyncio, and what the thread said before."""

    depth = 0
    previous: str | None = None


_named = _Named()


@contextlib.contextmanager
def asyncio_named_for_sniffio() -> Iterator[None]:
    """Say, for this thread, that asyncio runs it (``sniffio.thread_local.name``).

    httpcore and anyio ask sniffio which library runs them on every lock, event and
    cancel scope of a provider call, about ten times per call. Unless the thread's runner
    says so, as trio's does, sniffio finds out through ``asyncio.current_task()`` each
    time: 3.8 % of the gateway's py-spy samples under sync load (docs/decisions.md). The
    gateway's threads run asyncio only (uvloop is asyncio); what the thread said before
    is put back when the thread's last runtime ends.
    """
    if _named.depth == 0:
        _named.previous = sniffio.thread_local.name
    _named.depth += 1
    sniffio.thread_local.name = "asyncio"
    try:
        yield
    finally:
        _named.depth -= 1
        if _named.depth == 0:  # the thread's last runtime, whatever order they ended in
            sniffio.thread_local.name = _named.previous


@contextlib.asynccontextmanager
async def running(
    settings: Settings,
    factories: Sequence[ServiceFactory],
    *,
    hub: ChangeHub,
    metrics: Metrics,
    store: JobStore | None = None,
    catalog: Mapping[str, ContractSpec] | None = None,
    certifications: Certifications | None = None,
) -> AsyncIterator[Runtime]:
    """Open the store, build the service and start the background services; undo on exit.

    The one composition path: ``create_app``'s lifespan (``onejob serve``) and
    ``onejob worker`` both run inside it. An injected ``store`` is used as is, not closed.
    """
    from gateway.service import JobService

    own_store = store is None
    if store is None:
        from gateway.store import open_store

        the_store: JobStore = await open_store(
            settings.database_url,
            hub=hub,
            processes=settings.workers,
            database=settings.database,
        )
    else:
        the_store = store
    the_catalog = _default_catalog() if catalog is None else catalog
    the_certs = _default_certifications(settings) if certifications is None else certifications
    service = JobService(the_store, settings, the_catalog, the_certs, hub, metrics)
    runtime = Runtime(settings, the_store, hub, the_catalog, the_certs, service, metrics)
    started: list[BackgroundService] = []
    with asyncio_named_for_sniffio():
        try:
            for factory in factories:
                svc = factory(runtime)
                await svc.start()
                started.append(svc)
            yield runtime
        finally:
            for svc in reversed(started):
                try:
                    await svc.stop()
                except Exception:
                    log.exception("background service failed to stop: %r", svc)
            if own_store:
                await the_store.close()
