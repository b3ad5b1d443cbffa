"""The composition root: ``create_app(settings)`` wires store, service and routes.

Nothing is opened at import time. The lifespan opens the store (unless one is injected),
builds the service, then starts the *background services* - the dispatcher, the PostgreSQL
LISTEN relay - from a list of factories, and stops them in reverse order on shutdown.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from litestar import Litestar
from litestar.openapi.config import OpenAPIConfig

from gateway.domain.ports import Certifications, ContractSpec, JobStore
from gateway.http.console import console_router
from gateway.http.openapi import SECURITY_COMPONENTS, StrictStructSchemaPlugin
from gateway.http.rawpath import raw_path_guard
from gateway.http.responses import handle_exception
from gateway.http.routes import healthz, healthz_head, metrics_endpoint, readyz, v1_router
from gateway.logging import access_log_middleware
from gateway.metrics import Metrics
from gateway.notify import ChangeHub
from gateway.runtime import BackgroundService, Runtime, ServiceFactory, postgres_relay
from gateway.service import JobService
from gateway.settings import Settings
from gateway.store.engine import listen_dsn

log = logging.getLogger(__name__)


def default_background(settings: Settings, metrics: Metrics) -> list[ServiceFactory]:
    """Return the background services a served gateway runs: LISTEN relay, dispatcher."""
    factories: list[ServiceFactory] = []
    if listen_dsn(settings.database_url) is not None:
        factories.append(postgres_relay)
    if settings.dispatcher.enabled:
        from gateway.dispatch.wiring import dispatcher_factory

        factories.append(dispatcher_factory(metrics))
    return factories


def _default_catalog() -> Mapping[str, ContractSpec]:
    from contracts.catalog import load_catalog

    return load_catalog()


def _default_certifications(settings: Settings) -> Certifications:
    from contracts.registry import CertificationRegistry

    return CertificationRegistry(settings.certifications_path)


def create_app(
    settings: Settings,
    *,
    store: JobStore | None = None,
    catalog: Mapping[str, ContractSpec] | None = None,
    certifications: Certifications | None = None,
    hub: ChangeHub | None = None,
    metrics: Metrics | None = None,
    background: Sequence[ServiceFactory] | None = None,
) -> Litestar:
    """Build the gateway app; the store opens (and background services start) on startup.

    An injected ``store`` is used as is and not closed; ``background=None`` means
    ``default_background(settings, metrics)``, ``[]`` runs none.
    """
    the_hub = hub or ChangeHub()
    the_metrics = metrics or Metrics()
    factories = list(
        default_background(settings, the_metrics) if background is None else background
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        own_store = store is None
        if store is None:
            from gateway.store import open_store

            the_store: JobStore = await open_store(settings.database_url, hub=the_hub)
        else:
            the_store = store
        the_catalog = _default_catalog() if catalog is None else catalog
        the_certs = _default_certifications(settings) if certifications is None else certifications
        service = JobService(the_store, settings, the_catalog, the_certs, the_hub, the_metrics)
        app.state.service = service
        runtime = Runtime(
            settings, the_store, the_hub, the_catalog, the_certs, service, the_metrics
        )
        started: list[BackgroundService] = []
        try:
            for factory in factories:
                svc = factory(runtime)
                await svc.start()
                started.append(svc)
            yield
        finally:
            for svc in reversed(started):
                try:
                    await svc.stop()
                except Exception:
                    log.exception("background service failed to stop: %r", svc)
            if own_store:
                await the_store.close()

    app = Litestar(
        route_handlers=[
            v1_router(),
            console_router(),
            healthz,
            healthz_head,
            readyz,
            metrics_endpoint,
        ],
        lifespan=[lifespan],
        exception_handlers={Exception: handle_exception},
        request_max_body_size=settings.max_body_bytes,
        openapi_config=OpenAPIConfig(
            title="onejob",
            version="1",
            path="/schema",
            description=_DESCRIPTION,
            components=SECURITY_COMPONENTS,
        ),
        plugins=[StrictStructSchemaPlugin()],
        debug=False,
        logging_config=None,  # gateway.logging configures JSON lines; Litestar must not
    )
    # Around Litestar's whole handler, not its per-route middleware: 404, 405 and the
    # refusal of an encoded slash happen before any route is chosen, and are logged too.
    app.asgi_handler = access_log_middleware(raw_path_guard(app.asgi_handler))
    return app


_DESCRIPTION = (
    "One user intention becomes one durable job; every try is an attempt; exactly one "
    "attempt writes the result. Errors are application/problem+json."
)


def settings_for_tests(**overrides: Any) -> Settings:
    """Return settings with the bundled simulator routes and the dispatcher off."""
    from gateway.settings import simulator_defaults

    data = simulator_defaults()
    data["simulator"]["enabled"] = False
    data["dispatcher"] = {"enabled": False}
    data.update(overrides)
    return Settings.model_validate(data)
