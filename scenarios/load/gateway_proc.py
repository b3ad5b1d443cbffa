"""Serve one gateway with its dispatcher for the benchmark, metrics on a side port.

``python -m scenarios.load.gateway_proc --settings S.json --metrics-port M`` migrates the
database, serves ``create_app`` with the dispatcher (and the LISTEN relay on PostgreSQL)
on ``settings.host:settings.port`` and the process's Prometheus registry on ``M``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from gateway.logging import configure_logging
from gateway.settings import Settings


async def serve(settings: Settings, metrics_port: int) -> None:
    """Serve the gateway until interrupted."""
    import uvicorn
    from prometheus_client import start_http_server

    from gateway.app import ServiceFactory, create_app, postgres_relay
    from gateway.dispatch.wiring import dispatcher_factory
    from gateway.metrics import Metrics
    from gateway.store import upgrade_database

    await upgrade_database(settings.database_url)
    metrics = Metrics()
    start_http_server(metrics_port, addr="127.0.0.1", registry=metrics.registry)
    background: list[ServiceFactory] = []
    if settings.database_url.startswith("postgresql"):
        background.append(postgres_relay)
    background.append(dispatcher_factory(metrics))
    app = create_app(settings, background=background)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        lifespan="on",
    )
    await uvicorn.Server(config).serve()


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and serve."""
    parser = argparse.ArgumentParser(prog="python -m scenarios.load.gateway_proc")
    parser.add_argument("--settings", required=True, help="Settings as a JSON file")
    parser.add_argument("--metrics-port", type=int, required=True)
    args = parser.parse_args(argv)
    settings = Settings.model_validate_json(Path(args.settings).read_text(encoding="utf-8"))
    configure_logging(settings.log_level)
    asyncio.run(serve(settings, args.metrics_port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
