"""``onejob worker``: run the attempt dispatcher alone, without the HTTP API.

Any number of workers (and ``onejob serve`` processes) may share one database; claiming is
atomic there. A worker never migrates: it refuses to start on a database that is not at the
newest schema (``onejob db upgrade`` or ``onejob serve`` migrate).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from typing import TYPE_CHECKING

from cli.arguments import Subcommands, add_settings_args, settings_from

if TYPE_CHECKING:
    from gateway.settings import Settings

log = logging.getLogger("onejob.worker")

COMMANDS = {"worker": "run attempts against providers (the dispatcher alone, no HTTP API)"}
EXIT_NOT_MIGRATED = 2
EXIT_NO_STANDBY = 2


def register(subcommands: Subcommands) -> None:
    """Add ``onejob worker``."""
    parser = subcommands.add_parser("worker", help=COMMANDS["worker"])
    add_settings_args(parser)
    parser.add_argument("--runners", type=int, help="concurrent attempt runners (default: config)")
    parser.add_argument(
        "--metrics-port", type=int, help="serve Prometheus metrics on this port (default: none)"
    )
    parser.set_defaults(func=cmd_worker)


def cmd_worker(args: argparse.Namespace) -> int:
    """Run the worker until SIGTERM or SIGINT; return the exit code."""
    from gateway.logging import configure_logging
    from gateway.store.replication import NoSynchronousStandby

    settings = settings_from(args)
    if args.runners is not None:
        dispatcher = settings.dispatcher.model_copy(update={"runners": args.runners})
        settings = settings.model_copy(update={"dispatcher": dispatcher})
    configure_logging(settings.log_level)
    try:
        return asyncio.run(run_worker(settings, metrics_port=args.metrics_port))
    except NoSynchronousStandby as exc:
        print(f"onejob worker: {exc}", file=sys.stderr)
        return EXIT_NO_STANDBY


async def run_worker(
    settings: Settings, *, stop: asyncio.Event | None = None, metrics_port: int | None = None
) -> int:
    """Run the dispatcher and the reaper until ``stop`` is set (or a signal arrives)."""
    from cli.recertify import recertify_forever
    from gateway.bootstrap import default_background, running, warn_of_missing_api_keys
    from gateway.metrics import Metrics
    from gateway.notify import ChangeHub
    from gateway.store import database_is_current
    from gateway.store.replication import check_synchronous_standby

    if not await database_is_current(settings.database_url):
        print(
            "onejob worker: the database is not at the newest schema; "
            "run `onejob db upgrade` (or start `onejob serve`) first",
            file=sys.stderr,
        )
        return EXIT_NOT_MIGRATED
    await check_synchronous_standby(settings.database_url, settings.database)
    warn_of_missing_api_keys(settings)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)

    hub = ChangeHub()
    metrics = Metrics()
    if metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(metrics_port, addr="127.0.0.1", registry=metrics.registry)
    # The same composition as `onejob serve`, without the HTTP server: the dispatcher runs
    # whatever `[dispatcher] enabled` says, since running it is the worker's whole job.
    factories = default_background(settings, metrics, dispatcher=True)
    async with running(settings, factories, hub=hub, metrics=metrics):
        log.info(
            "worker started",
            extra={"worker_id": settings.instance_id, "runners": settings.dispatcher.runners},
        )
        # Certificates never lapse by surprise (issue 38): `certify --due` on a schedule.
        recertify = (
            asyncio.create_task(recertify_forever(settings, stop, metrics), name="recertify")
            if settings.certification.recertify
            else None
        )
        await stop.wait()
        if recertify is not None:
            recertify.cancel()
            await asyncio.gather(recertify, return_exceptions=True)
        log.info("worker stopping", extra={"worker_id": settings.instance_id})
    return 0
