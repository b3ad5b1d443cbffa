"""The services a process runs beside its HTTP server: the dispatcher and the LISTEN relay.

``DispatcherService`` owns what the dispatcher needs beyond the store: one pooled
``httpx.AsyncClient`` shared by every provider adapter (``provider_http_client``). Beside
the dispatcher it starts, on the same adapters, what the composition root built for them
(``beside``: the reconciler's periodic pass, the shadow checks; ``gateway.bootstrap``
decides which and builds them). ``PostgresRelay`` relays other processes' ``pg_notify``
into this process's hub. None of them knows the composition root.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping

import httpx

from gateway.capacity.gate import Capacity
from gateway.capacity.sharing import CapacitySync
from gateway.dispatch.dispatcher import Dispatcher
from gateway.dispatch.routing import Routes
from gateway.domain.ports import BackgroundService, Clock, ContractSpec, JobStore, Provider
from gateway.domain.records import ClaimedAttempt, ClaimSpec, JobRecord, NewJob
from gateway.metrics import Metrics
from gateway.notify import ChangeHub, RelayState, listen_postgres
from gateway.periodic import Periodic
from gateway.service.admission import QueueAdmission
from gateway.settings import Settings
from gateway.store.pg_connections import PostgresConnector
from gateway.tracing import NO_TRACING, Tracing
from providers.client import provider_client
from providers.factory import build_provider

log = logging.getLogger(__name__)

POOL_CONNECTIONS_PER_RUNNER = 2  # connections: a runner's call, plus the hedge it may start
MIN_POOL_CONNECTIONS = 20  # connections
KEEPALIVE_EXPIRY = 30.0  # seconds
RELAY_STOP_TIMEOUT = 5.0  # seconds

#: Builds what runs beside the dispatcher on its adapters (``gateway.bootstrap`` decides).
Beside = Callable[[Mapping[str, Provider]], list[BackgroundService]]


def provider_http_client(
    settings: Settings, transport: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncClient:
    """Return the pooled client every provider adapter of this process shares."""
    pool = max(MIN_POOL_CONNECTIONS, POOL_CONNECTIONS_PER_RUNNER * settings.dispatcher.runners)
    return provider_client(
        httpx.Limits(
            max_connections=pool, max_keepalive_connections=pool, keepalive_expiry=KEEPALIVE_EXPIRY
        ),
        transport,
        own_pool=settings.shortcuts.provider_pool,
    )


def build_providers(
    settings: Settings, client: httpx.AsyncClient, names: Iterable[str] | None = None
) -> dict[str, Provider]:
    """Return one adapter per configured provider (or per name in ``names``) on ``client``."""
    chosen = settings.providers if names is None else {n: settings.providers[n] for n in names}
    return {name: build_provider(cfg, client) for name, cfg in chosen.items()}


class DispatcherService:
    """Start and stop a dispatcher together with the HTTP client its providers share."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: JobStore,
        hub: ChangeHub,
        catalog: Mapping[str, ContractSpec],
        routes: Routes,
        metrics: Metrics,
        clock: Clock | None = None,
        worker_id: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        capacity: Capacity | None = None,
        beside: Beside | None = None,
        tracing: Tracing = NO_TRACING,
    ) -> None:
        self.settings = settings
        self._tracing = tracing
        self._store = store
        self._hub = hub
        self._catalog = catalog
        self._routes = routes
        self._beside = beside
        self._metrics = metrics
        self._clock = clock
        self._worker_id = worker_id or settings.instance_id
        self._transport = transport
        #: Whether new jobs' first attempts may still take a slot here (``reserve``).
        self._first_attempts = False
        self.capacity = capacity or Capacity(settings.providers, settings.capacity)
        self._client: httpx.AsyncClient | None = None
        self.dispatcher: Dispatcher | None = None
        self.sharing: CapacitySync | None = None
        #: What runs beside the dispatcher on its adapters (the reconciler, the shadow
        #: checks), as the composition root built it.
        self.beside: list[BackgroundService] = []

    async def start(self) -> None:
        """Open the client, build one adapter per configured provider, start the runners."""
        self._client = provider_http_client(self.settings, self._transport)
        providers = build_providers(self.settings, self._client)
        self.dispatcher = Dispatcher(
            store=self._store,
            hub=self._hub,
            providers=providers,
            provider_configs=self.settings.providers,
            catalog=self._catalog,
            routes=self._routes,
            settings=self.settings,
            metrics=self._metrics,
            clock=self._clock,
            worker_id=self._worker_id,
            capacity=self.capacity,
            tracing=self._tracing,
        )
        self.sharing = CapacitySync(
            self.capacity,
            self._store,
            self._worker_id,
            interval=self.settings.capacity.sync_interval,
        )
        await self.sharing.start()
        await self.dispatcher.start()
        self._first_attempts = True
        for service in self._beside(providers) if self._beside is not None else []:
            await service.start()
            self.beside.append(service)

    async def stop(self) -> None:
        """Stop the runners gracefully, then close the client."""
        self._first_attempts = False  # new jobs queue from now on
        try:
            while self.beside:
                await self.beside.pop().stop()
            if self.dispatcher is not None:
                if in_flight := self.dispatcher.in_flight:
                    log.info(
                        "waiting for %d attempt%s in flight (at most shutdown_grace, %gs)",
                        in_flight,
                        "" if in_flight == 1 else "s",
                        self.settings.dispatcher.shutdown_grace,
                        extra={"in_flight": in_flight, "worker_id": self._worker_id},
                    )
                await self.dispatcher.stop()
            if self.sharing is not None:
                await self.sharing.stop()
                self.sharing = None
        finally:
            if self._client is not None:
                await self._client.aclose()
                self._client = None

    # -- the service's LocalRunner: new jobs' first attempts, run here ---------------------

    async def reserve(self, provider: str, job: NewJob | None = None) -> ClaimSpec | None:
        """Take one of the dispatcher's runner slots; None while it is not running."""
        if not self._first_attempts or self.dispatcher is None:
            return None
        return await self.dispatcher.reserve(provider, job)

    def release(self) -> None:
        """Give back a slot ``reserve`` took."""
        assert self.dispatcher is not None
        self.dispatcher.release()

    def run_claimed(
        self, claimed: ClaimedAttempt, spec: ClaimSpec | None = None
    ) -> asyncio.Task[JobRecord | None]:
        """Run an attempt claimed at creation in the slot ``reserve`` took."""
        assert self.dispatcher is not None
        return self.dispatcher.run_claimed(claimed, spec)


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
                await asyncio.wait_for(self._task, RELAY_STOP_TIMEOUT)


class QueueWatch(Periodic):
    """Count the queue (unsent attempts, every process) once per ``interval``: admission
    refuses new jobs past ``[admission] max_queued`` by this count, and the queue's gauges
    show it. A count the database cannot give leaves the last one in force."""

    task_name = "onejob-queue-watch"

    def __init__(
        self,
        store: JobStore,
        admission: QueueAdmission,
        capacity: Capacity,
        metrics: Metrics,
        *,
        interval: float,
    ) -> None:
        super().__init__(interval)
        self._store = store
        self._admission = admission
        self._capacity = capacity
        self._metrics = metrics

    async def tick(self) -> None:
        """Count now (the first when the process starts)."""
        await self.count()

    async def count(self) -> None:
        """Count the queue once."""
        try:
            depth = await self._store.queue_depth()
        except Exception as exc:
            if not self._store.unavailable(exc, "queue count"):
                log.exception("the queue could not be counted")
            return
        self._admission.counted(depth)
        self._capacity.queue_counted(depth)
        self._metrics.capacity.show_queue(depth)
