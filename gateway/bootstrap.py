"""The composition root: what every command builds from ``Settings``, each in one place.

The store is opened here and nowhere else (``open_store_for``), with the settings'
database deadlines, speed shortcuts and process count; so are the contract catalog, the
certification registry, the job service and the background services. ``running`` is the
one composition path: ``gateway.app.create_app``'s lifespan (``onejob serve``) and
``onejob worker`` run inside it; ``onejob reconcile`` takes ``reconciler_pass``, the
store commands (``onejob keys``, ``onejob jobs``) take ``migrated_store`` and ``onejob
certify --production`` takes ``production_samples``. Nothing here
runs at import time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any

import httpx
import sniffio

from contracts.loader import load_catalog
from contracts.registry import CertificationRegistry
from gateway.background import (
    Beside,
    DispatcherService,
    PostgresRelay,
    QueueWatch,
    build_providers,
    provider_http_client,
)
from gateway.capacity.gate import Capacity
from gateway.database_url import relay_url
from gateway.dispatch.routing import Routes
from gateway.domain.clock import SystemClock
from gateway.domain.ports import (
    BackgroundService,
    Certifications,
    Clock,
    ContractSpec,
    FailoverSuspensions,
    JobStore,
    Provider,
    Reconcilable,
    ShadowStore,
)
from gateway.http.views import job_view
from gateway.metrics import Metrics
from gateway.notify import ChangeHub
from gateway.reconciler import Reconciler
from gateway.service import JobService
from gateway.settings import Settings
from gateway.shadow import ShadowChecker
from gateway.store import SqlJobStore, open_store, upgrade_database
from gateway.store.pg_connections import PostgresConnector
from gateway.tracing import NO_TRACING, TelemetryConfig, Tracing
from gateway.webhooks.delivery import WebhookDelivery

log = logging.getLogger("onejob.runtime")


@dataclasses.dataclass(frozen=True, slots=True)
class Opened:
    """What the composition root opened and decided, before the service is built."""

    settings: Settings
    store: JobStore
    hub: ChangeHub
    catalog: Mapping[str, ContractSpec]
    certifications: Certifications
    metrics: Metrics
    #: What this process knows of its providers' capacity (the dispatcher paces by it).
    capacity: Capacity
    #: Failover and hedge routing: built once, here, for the service, the dispatcher,
    #: the reconciler and the shadow checks.
    routes: Routes
    #: Optional capabilities, decided once here: the registry's suspensions (None: it
    #: keeps none) and the store's shadow checks (None: it cannot keep them).
    suspensions: FailoverSuspensions | None
    shadows: ShadowStore | None
    #: Spans: OpenTelemetry's when ``[telemetry]`` enables them, else the null tracer.
    tracing: Tracing


@dataclasses.dataclass(frozen=True, slots=True)
class Runtime(Opened):
    """What a background service may be built from, once the store is open."""

    service: JobService


#: Builds one background service from the runtime (the dispatcher is wired in here).
ServiceFactory = Callable[[Runtime], BackgroundService]


async def open_store_for(settings: Settings, *, hub: ChangeHub | None = None) -> SqlJobStore:
    """Open the store the settings describe (the caller has migrated, and closes it)."""
    return await open_store(
        settings.database_url,
        hub=hub,
        processes=settings.workers,
        database=settings.database,
        shortcuts=settings.shortcuts,
    )


@contextlib.asynccontextmanager
async def migrated_store(settings: Settings) -> AsyncIterator[SqlJobStore]:
    """Migrate the database to the newest schema, open the store, and close it on exit."""
    await upgrade_database(settings.database_url)
    store = await open_store_for(settings)
    try:
        yield store
    finally:
        await store.close()


async def production_samples(
    settings: Settings, contract: str, primary: str, limit: int
) -> list[dict[str, Any]]:
    """Return the newest ``limit`` succeeded jobs of ``contract`` that ``primary`` answered,
    as plain data (``job_id``, ``input``, ``result``) for ``onejob certify --production``."""
    store = await open_store_for(settings)
    try:
        rows = await store.production_samples(contract, primary, limit=limit)
    finally:
        await store.close()
    return [{"job_id": r.job_id, "input": r.input, "result": r.result} for r in rows]


def warn_of_missing_api_keys(settings: Settings, env: Mapping[str, str] | None = None) -> int:
    """Log a warning per provider whose ``api_key_env`` variable is unset; return how many.

    Said once at start (``onejob serve``, ``onejob worker``): each call to such a provider
    would be refused, and the job's error says which variable (``JsonHttpAdapter.hint``).
    """
    env = os.environ if env is None else env
    missing = 0
    for name, cfg in sorted(settings.providers.items()):
        if cfg.api_key_env and not env.get(cfg.api_key_env):
            missing += 1
            log.warning(
                "provider %s has no API key: %s is not set; its calls will be refused",
                name,
                cfg.api_key_env,
                extra={"provider": name, "api_key_env": cfg.api_key_env},
            )
    return missing


def load_contracts() -> Mapping[str, ContractSpec]:
    """Load the bundled contract catalog."""
    return load_catalog()


def certifications_for(settings: Settings) -> Certifications:
    """Open the certification registry the settings name."""
    return CertificationRegistry(settings.certifications_path)


def postgres_relay(runtime: Runtime) -> BackgroundService:
    """Build the LISTEN relay (only for a database that has LISTEN: PostgreSQL)."""
    settings = runtime.settings
    url = relay_url(settings.database_url, settings.database.listen_url, settings.database.pooler)
    connector = PostgresConnector(url or settings.database_url, settings.database)
    return PostgresRelay(connector, runtime.hub, runtime.metrics)


def build_tracing(config: TelemetryConfig) -> Tracing:
    """Return the tracer ``[telemetry]`` asks for: OpenTelemetry's when enabled (the
    ``otel`` extra must be installed), else the null one, which imports nothing of it."""
    if not config.enabled:
        return NO_TRACING
    from gateway.tracing_otel import OtelTracing  # only now: off imports nothing of it

    return OtelTracing(config)


def build_reconciler(
    settings: Settings,
    *,
    store: JobStore,
    providers: Mapping[str, object],
    catalog: Mapping[str, ContractSpec],
    routes: Routes,
    metrics: Metrics,
    clock: Clock | None = None,
    tracing: Tracing = NO_TRACING,
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
        tracing=tracing,
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
    tracing: Tracing = NO_TRACING,
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
        tracing=tracing,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class DispatcherFactory:
    """Runs the dispatcher (and what runs beside it) in the process. ``running`` builds it
    before the service, which runs new jobs' first attempts on it when the
    ``first_attempt_in_process`` shortcut is on."""

    metrics: Metrics
    clock: Clock | None = None

    def build(self, opened: Opened) -> DispatcherService:
        """Build the dispatcher's service from what the root opened."""
        return DispatcherService(
            opened.settings,
            store=opened.store,
            hub=opened.hub,
            catalog=opened.catalog,
            routes=opened.routes,
            metrics=self.metrics,
            clock=self.clock,
            capacity=opened.capacity,
            beside=beside_the_dispatcher(opened, self.metrics, self.clock),
            tracing=opened.tracing,
        )

    def __call__(self, runtime: Runtime) -> DispatcherService:
        return self.build(runtime)


def dispatcher_factory(metrics: Metrics, *, clock: Clock | None = None) -> DispatcherFactory:
    """Return a background factory that runs the dispatcher (and reconciler) in the process."""
    return DispatcherFactory(metrics, clock)


def beside_the_dispatcher(opened: Opened, metrics: Metrics, clock: Clock | None) -> Beside:
    """Return what builds, on the dispatcher's adapters, the services that run beside it:
    the reconciler's periodic pass when a provider reconciles, the shadow checks when
    ``[shadow] sample_rate`` is above 0 and the store and registry can keep them."""

    def build(providers: Mapping[str, Provider]) -> list[BackgroundService]:
        settings = opened.settings
        services: list[BackgroundService] = []
        if settings.reconciler.enabled:
            reconciler = build_reconciler(
                settings,
                store=opened.store,
                providers=providers,
                catalog=opened.catalog,
                routes=opened.routes,
                metrics=metrics,
                clock=clock,
                tracing=opened.tracing,
            )
            if reconciler.active:  # off when no provider reconciles
                services.append(reconciler)
        shadow = build_shadow_checker(
            settings,
            shadows=opened.shadows,
            suspensions=opened.suspensions,
            providers=providers,
            catalog=opened.catalog,
            routes=opened.routes,
            metrics=metrics,
            clock=clock,
            tracing=opened.tracing,
        )
        if shadow is not None and shadow.active:  # off unless [shadow] sample_rate > 0
            services.append(shadow)
        return services

    return build


def queue_watch(runtime: Runtime) -> BackgroundService:
    """Build the queue's count: admission's depth and the queue's gauges (issue 43)."""
    return QueueWatch(
        runtime.store,
        runtime.service.admission,
        runtime.capacity,
        runtime.metrics,
        interval=runtime.settings.admission.interval,
    )


def webhook_delivery(runtime: Runtime) -> BackgroundService:
    """Build the webhooks' delivery on its own client: no redirects, no proxy from the env."""
    config = runtime.settings.webhooks
    client = httpx.AsyncClient(follow_redirects=False, timeout=config.timeout, trust_env=False)
    return WebhookDelivery(
        runtime.store,
        config,
        client,
        render=job_view,
        clock=SystemClock(),
        metrics=runtime.metrics.webhooks,
    )


def default_background(
    settings: Settings, metrics: Metrics, *, dispatcher: bool | None = None
) -> list[ServiceFactory]:
    """Return the background services a process runs: the queue's count, the webhooks'
    delivery, the LISTEN relay, the dispatcher (with the reconciler and the capacity
    sharing beside it) unless ``dispatcher`` (default: the settings) says no."""
    factories: list[ServiceFactory] = [queue_watch, webhook_delivery]
    if relay_url(settings.database_url, settings.database.listen_url, settings.database.pooler):
        factories.append(postgres_relay)
    if settings.dispatcher.enabled if dispatcher is None else dispatcher:
        factories.append(dispatcher_factory(metrics))
    return factories


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
    tracing: Tracing | None = None,
) -> AsyncIterator[Runtime]:
    """Open the store, build the service and start the background services; undo on exit.

    The one composition path: ``create_app``'s lifespan (``onejob serve``) and
    ``onejob worker`` both run inside it. An injected ``store`` is used as is, not closed;
    so is an injected ``tracing`` (``create_app`` builds it, to wrap the app in it),
    otherwise it is built from ``[telemetry]`` and shut down (its spans exported) on exit.
    """
    own_tracing = tracing is None
    the_tracing = build_tracing(settings.telemetry) if tracing is None else tracing
    own_store = store is None
    the_store = await open_store_for(settings, hub=hub) if store is None else store
    the_catalog = load_contracts() if catalog is None else catalog
    the_certs = certifications_for(settings) if certifications is None else certifications
    capacity = Capacity(settings.providers, settings.capacity)
    routes = Routes(settings, the_catalog, settings.providers, the_certs)
    suspensions = the_certs if isinstance(the_certs, FailoverSuspensions) else None
    shadows = the_store if isinstance(the_store, ShadowStore) else None
    opened = Opened(
        settings=settings,
        store=the_store,
        hub=hub,
        catalog=the_catalog,
        certifications=the_certs,
        metrics=metrics,
        capacity=capacity,
        routes=routes,
        suspensions=suspensions,
        shadows=shadows,
        tracing=the_tracing,
    )
    # The dispatcher before the service: the service runs new jobs' first attempts on it.
    dispatching = next((f for f in factories if isinstance(f, DispatcherFactory)), None)
    dispatcher = None if dispatching is None else dispatching.build(opened)
    local = dispatcher if settings.shortcuts.first_attempt_in_process else None
    service = JobService(
        the_store,
        settings,
        the_catalog,
        the_certs,
        hub,
        metrics,
        capacity=capacity,
        routes=routes,
        suspensions=suspensions,
        shadows=shadows,
        local_runner=local,
        tracing=the_tracing,
    )
    runtime = Runtime(
        **{f.name: getattr(opened, f.name) for f in dataclasses.fields(opened)}, service=service
    )
    started: list[BackgroundService] = []
    with asyncio_named_for_sniffio():
        try:
            for factory in factories:
                svc: BackgroundService = (
                    dispatcher
                    if isinstance(factory, DispatcherFactory) and dispatcher is not None
                    else factory(runtime)
                )
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
            if own_tracing:
                the_tracing.shutdown()


@contextlib.asynccontextmanager
async def reconciler_pass(settings: Settings, names: Sequence[str]) -> AsyncIterator[Reconciler]:
    """Build a reconciler over the providers ``names`` for one pass; close all on exit.

    The caller has checked the database is migrated (a pass never migrates).
    """
    store = await open_store_for(settings)
    catalog = load_contracts()
    routes = Routes(settings, catalog, settings.providers, certifications_for(settings))
    try:
        async with provider_http_client(settings) as client:
            yield build_reconciler(
                settings,
                store=store,
                providers=build_providers(settings, client, names),
                catalog=catalog,
                routes=routes,
                metrics=Metrics(),
            )
    finally:
        await store.close()
