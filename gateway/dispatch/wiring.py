"""Build a dispatcher from settings and run it for a process's lifetime.

``DispatcherService`` owns what the dispatcher needs beyond the store: one pooled
``httpx.AsyncClient`` shared by every provider adapter. ``dispatcher_factory`` plugs it into
``create_app(..., background=[...])``; ``onejob worker`` uses ``DispatcherService`` directly.
Beside the dispatcher it runs the reconciler's periodic pass, on the same adapters, when a
provider is configured with ``reconcile = true`` (``build_reconciler``; ``onejob reconcile``
builds one for a single pass).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import httpx

from gateway.dispatch.routing import Routes
from gateway.dispatcher import Dispatcher
from gateway.domain.clock import Clock
from gateway.domain.ports import Certifications, ContractSpec, JobStore
from gateway.metrics import Metrics
from gateway.notify import ChangeHub
from gateway.reconciler import Reconciler
from gateway.settings import Settings
from providers.factory import build_provider
from providers.network import provider_client

if TYPE_CHECKING:
    from gateway.runtime import Runtime
    from gateway.service import JobService

log = logging.getLogger(__name__)

POOL_CONNECTIONS_PER_RUNNER = 2  # connections: a runner's call, plus the hedge it may start
MIN_POOL_CONNECTIONS = 20  # connections
KEEPALIVE_EXPIRY = 30.0  # seconds


class DispatcherService:
    """Start and stop a dispatcher together with the HTTP client its providers share."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: JobStore,
        hub: ChangeHub,
        catalog: Mapping[str, ContractSpec],
        certifications: Certifications,
        metrics: Metrics,
        clock: Clock | None = None,
        worker_id: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        service: JobService | None = None,
    ) -> None:
        self.settings = settings
        self._store = store
        self._hub = hub
        self._catalog = catalog
        self._certifications = certifications
        self._metrics = metrics
        self._clock = clock
        self._worker_id = worker_id or settings.instance_id
        self._transport = transport
        self._service = service
        self._client: httpx.AsyncClient | None = None
        self.dispatcher: Dispatcher | None = None
        self.reconciler: Reconciler | None = None

    async def start(self) -> None:
        """Open the client, build one adapter per configured provider, start the runners."""
        pool = max(
            MIN_POOL_CONNECTIONS, POOL_CONNECTIONS_PER_RUNNER * self.settings.dispatcher.runners
        )
        self._client = provider_client(
            httpx.Limits(
                max_connections=pool,
                max_keepalive_connections=pool,
                keepalive_expiry=KEEPALIVE_EXPIRY,
            ),
            self._transport,
            own_pool=self.settings.shortcuts.provider_pool,
        )
        providers = {
            name: build_provider(cfg, self._client) for name, cfg in self.settings.providers.items()
        }
        self.dispatcher = Dispatcher(
            store=self._store,
            hub=self._hub,
            providers=providers,
            provider_configs=self.settings.providers,
            catalog=self._catalog,
            certifications=self._certifications,
            settings=self.settings,
            metrics=self._metrics,
            clock=self._clock,
            worker_id=self._worker_id,
        )
        await self.dispatcher.start()
        if self._service is not None and self.settings.shortcuts.first_attempt_in_process:
            self._service.use_local_runner(self.dispatcher)
        if self.settings.reconciler.enabled:
            reconciler = build_reconciler(
                self.settings,
                store=self._store,
                providers=providers,
                catalog=self._catalog,
                certifications=self._certifications,
                metrics=self._metrics,
                clock=self._clock,
            )
            if reconciler.active:  # off when no provider reconciles
                self.reconciler = reconciler
                await reconciler.start()

    async def stop(self) -> None:
        """Stop the runners gracefully, then close the client."""
        if self._service is not None:
            self._service.use_local_runner(None)
        try:
            if self.reconciler is not None:
                await self.reconciler.stop()
                self.reconciler = None
            if self.dispatcher is not None:
                await self.dispatcher.stop()
        finally:
            if self._client is not None:
                await self._client.aclose()
                self._client = None


def build_reconciler(
    settings: Settings,
    *,
    store: JobStore,
    providers: Mapping[str, object],
    catalog: Mapping[str, ContractSpec],
    certifications: Certifications,
    metrics: Metrics,
    clock: Clock | None = None,
) -> Reconciler:
    """Build a reconciler over the adapters; it fails over through the same ``Routes``."""
    return Reconciler(
        store=store,
        providers=providers,
        catalog=catalog,
        routes=Routes(settings, catalog, settings.providers, certifications),
        settings=settings,
        metrics=metrics,
        clock=clock,
    )


def dispatcher_factory(
    metrics: Metrics, *, clock: Clock | None = None
) -> Callable[[Runtime], DispatcherService]:
    """Return a ``create_app`` background factory that runs the dispatcher in the app."""

    def build(runtime: Runtime) -> DispatcherService:
        return DispatcherService(
            runtime.settings,
            store=runtime.store,
            hub=runtime.hub,
            catalog=runtime.catalog,
            certifications=runtime.certifications,
            metrics=metrics,
            clock=clock,
            service=runtime.service,
        )

    return build
