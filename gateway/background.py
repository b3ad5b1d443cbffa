"""The services a process runs beside its HTTP server: the dispatcher and the LISTEN relay.

``DispatcherService`` owns what the dispatcher needs beyond the store: one pooled
``httpx.AsyncClient`` shared by every provider adapter (``provider_http_client``). Beside
the dispatcher it runs the reconciler's periodic pass, on the same adapters, when a
provider is configured with ``reconcile = true``, and the shadow checks (issue 38,
``gateway.shadow``) when ``[shadow] sample_rate`` is above 0; ``build_reconciler`` is the
one place a reconciler is built (``onejob reconcile`` builds one for a single pass through
``gateway.bootstrap``). ``PostgresRelay`` relays other processes' ``pg_notify`` into this
process's hub. None of them knows the composition root: ``gateway.bootstrap`` builds them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping

import httpx

from gateway.capacity.gate import Capacity
from gateway.capacity.sharing import CapacitySync
from gateway.dispatch.dispatcher import Dispatcher
from gateway.dispatch.routing import Routes
from gateway.domain.ports import (
    Clock,
    ContractSpec,
    FailoverSuspensions,
    JobStore,
    Provider,
    Reconcilable,
    ShadowStore,
)
from gateway.metrics import Metrics
from gateway.notify import ChangeHub, RelayState, listen_postgres
from gateway.periodic import Periodic
from gateway.reconciler import Reconciler
from gateway.service import JobService
from gateway.service.admission import QueueAdmission
from gateway.settings import Settings
from gateway.shadow import ShadowChecker
from gateway.store.pg_connections import PostgresConnector
from providers.client import provider_client
from providers.factory import build_provider

log = logging.getLogger(__name__)

POOL_CONNECTIONS_PER_RUNNER = 2  # connections: a runner's call, plus the hedge it may start
MIN_POOL_CONNECTIONS = 20  # connections
KEEPALIVE_EXPIRY = 30.0  # seconds
RELAY_STOP_TIMEOUT = 5.0  # seconds


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


def build_reconciler(
    settings: Settings,
    *,
    store: JobStore,
    providers: Mapping[str, object],
    catalog: Mapping[str, ContractSpec],
    routes: Routes,
    metrics: Metrics,
    clock: Clock | None = None,
) -> Reconciler:
    """Build a reconciler over the adapters that can be asked (configured to reconcile,
    and ``Reconcilable``: decided here, not by the reconciler); it fails over through the
    process's one ``Routes``."""
    lookups = {
        name: provider
        for name, provider in providers.items()
        if name in settings.providers
        and settings.providers[name].reconcile
        and isinstance(provider, Reconcilable)
    }
    return Reconciler(
        store=store,
        lookups=lookups,
        catalog=catalog,
        routes=routes,
        settings=settings,
        metrics=metrics,
        clock=clock,
    )


def build_shadow_checker(
    settings: Settings,
    *,
    shadows: ShadowStore | None,
    suspensions: FailoverSuspensions | None,
    providers: Mapping[str, Provider],
    catalog: Mapping[str, ContractSpec],
    routes: Routes,
    metrics: Metrics,
    clock: Clock | None = None,
) -> ShadowChecker | None:
    """Build the shadow checks (issue 38) over the adapters; None when the store cannot
    keep them or the registry cannot suspend (the composition root says which can)."""
    if shadows is None or suspensions is None:
        return None
    return ShadowChecker(
        store=shadows,
        providers=providers,
        provider_configs=settings.providers,
        catalog=catalog,
        routes=routes,
        registry=suspensions,
        settings=settings,
        metrics=metrics.certification,
        clock=clock,
    )


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
        service: JobService | None = None,
        capacity: Capacity | None = None,
        suspensions: FailoverSuspensions | None = None,
        shadows: ShadowStore | None = None,
    ) -> None:
        self.settings = settings
        self._store = store
        self._hub = hub
        self._catalog = catalog
        self._routes = routes
        self._suspensions = suspensions
        self._shadows = shadows
        self._metrics = metrics
        self._clock = clock
        self._worker_id = worker_id or settings.instance_id
        self._transport = transport
        self._service = service
        self.capacity = capacity or Capacity(settings.providers, settings.capacity)
        self._client: httpx.AsyncClient | None = None
        self.dispatcher: Dispatcher | None = None
        self.sharing: CapacitySync | None = None
        self.reconciler: Reconciler | None = None
        self.shadow: ShadowChecker | None = None

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
        )
        self.sharing = CapacitySync(
            self.capacity,
            self._store,
            self._worker_id,
            interval=self.settings.capacity.sync_interval,
        )
        await self.sharing.start()
        await self.dispatcher.start()
        if self._service is not None and self.settings.shortcuts.first_attempt_in_process:
            self._service.use_local_runner(self.dispatcher)
        if self.settings.reconciler.enabled:
            reconciler = build_reconciler(
                self.settings,
                store=self._store,
                providers=providers,
                catalog=self._catalog,
                routes=self._routes,
                metrics=self._metrics,
                clock=self._clock,
            )
            if reconciler.active:  # off when no provider reconciles
                self.reconciler = reconciler
                await reconciler.start()
        shadow = build_shadow_checker(
            self.settings,
            shadows=self._shadows,
            suspensions=self._suspensions,
            providers=providers,
            catalog=self._catalog,
            routes=self._routes,
            metrics=self._metrics,
            clock=self._clock,
        )
        if shadow is not None and shadow.active:  # off unless [shadow] sample_rate > 0
            self.shadow = shadow
            await shadow.start()

    async def stop(self) -> None:
        """Stop the runners gracefully, then close the client."""
        if self._service is not None:
            self._service.use_local_runner(None)
        try:
            if self.shadow is not None:
                await self.shadow.stop()
                self.shadow = None
            if self.reconciler is not None:
                await self.reconciler.stop()
                self.reconciler = None
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
