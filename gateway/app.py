"""The HTTP app: ``create_app(settings)`` puts the routes on what ``gateway.bootstrap`` builds.

Nothing is opened at import time. The lifespan runs ``gateway.bootstrap.running``: it opens
the store (unless one is injected), builds the service, then starts the *background
services* - the dispatcher, the PostgreSQL LISTEN relay - from a list of factories, and
stops them in reverse order on shutdown.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from litestar import Litestar
from litestar.openapi.config import OpenAPIConfig

from gateway.bootstrap import ServiceFactory, build_tracing, default_background, running
from gateway.domain.ports import Certifications, ContractSpec, JobStore
from gateway.http.console import console_router, home
from gateway.http.direct import direct_create_route
from gateway.http.openapi import (
    SECURITY_COMPONENTS,
    StrictStructSchemaPlugin,
    describe_deployment,
)
from gateway.http.rawpath import raw_path_guard
from gateway.http.responses import handle_exception
from gateway.http.routes import (
    allow,
    healthz,
    healthz_head,
    metrics_endpoint,
    readyz,
    v1_router,
)
from gateway.http.schema_page import OfflineRedoc, favicon, schema_router
from gateway.logging import access_log_middleware
from gateway.metrics import Metrics
from gateway.notify import ChangeHub
from gateway.settings import Settings

log = logging.getLogger(__name__)


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
    tracing = build_tracing(settings.telemetry)
    the_metrics = metrics or Metrics()
    factories = list(
        default_background(settings, the_metrics) if background is None else background
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        try:
            async with running(
                settings,
                factories,
                hub=the_hub,
                metrics=the_metrics,
                store=store,
                catalog=catalog,
                certifications=certifications,
                tracing=tracing,
            ) as runtime:
                app.state.service = runtime.service
                describe_deployment(
                    app.openapi_schema,
                    runtime.catalog,
                    settings.providers,
                    lambda contract: settings.route_for(contract) is not None,
                )
                yield
        finally:
            tracing.shutdown()  # the spans still batched are exported
            the_metrics.process_ended()  # with several workers: its live gauges leave the sum

    app = Litestar(
        route_handlers=[
            v1_router(),
            console_router(),
            home,
            favicon,
            allow("/healthz", healthz, healthz_head),
            healthz,
            healthz_head,
            readyz,
            metrics_endpoint,
        ],
        lifespan=[lifespan],
        exception_handlers={Exception: handle_exception},
        request_max_body_size=settings.max_body_bytes,
        openapi_config=OpenAPIConfig(
            title="onejob API",
            version="v1",  # the paths' /v1, not the package's version
            path="/schema",
            description=_DESCRIPTION,
            components=SECURITY_COMPONENTS,
            # Served from the package, not a CDN: the page works offline (schema_page.py).
            render_plugins=[OfflineRedoc()],
            openapi_router=schema_router(),
        ),
        plugins=[StrictStructSchemaPlugin()],
        debug=False,
        logging_config=None,  # gateway.logging configures JSON lines; Litestar must not
    )
    # Around Litestar's whole handler, not its per-route middleware: 404, 405 and the
    # refusal of an encoded slash happen before any route is chosen, and are logged too.
    # Inside them, POST /v1/jobs goes straight to its handler (gateway.http.direct).
    handler = app.asgi_handler
    if settings.shortcuts.direct_route:
        handler = direct_create_route(app, handler, handle_exception)
    # Outermost: every request's SERVER span, on both paths (tracing off: no wrapper).
    app.asgi_handler = tracing.asgi(access_log_middleware(raw_path_guard(handler)))
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
