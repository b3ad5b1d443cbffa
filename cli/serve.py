"""``onejob serve``: migrate the database and serve the gateway (``gateway.server``)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING

from cli.arguments import Subcommands, add_settings_args, settings_from

if TYPE_CHECKING:
    from gateway.settings import Settings

COMMANDS = {"serve": "migrate the database and serve the gateway"}
EXIT_NO_STANDBY = 2
#: How a server with several workers starts the bundled simulator as its own process.
SIMULATOR_ARGV = ("-m", "cli", "sim", "serve")


def register(subcommands: Subcommands) -> None:
    """Add ``onejob serve``."""
    serve = subcommands.add_parser("serve", help=COMMANDS["serve"])
    add_settings_args(serve)
    serve.add_argument("--host", help="default 127.0.0.1 ($ONEJOB_HOST)")
    serve.add_argument("--port", type=int, help="default 8000 ($ONEJOB_PORT)")
    serve.add_argument(
        "--workers",
        type=int,
        help="worker processes on one socket (default: $ONEJOB_WORKERS, else sized: "
        "on PostgreSQL one per CPU, one per two CPUs when it is on this host; 1 on SQLite; "
        "0 sizes it too)",
    )
    serve.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    """Migrate, start the bundled simulator if configured, and serve until interrupted."""
    from gateway.logging import configure_logging

    settings = settings_from(args, host=args.host, port=args.port, workers=args.workers)
    configure_logging(settings.log_level)
    return serve_settings(settings)


def serve_settings(settings: Settings) -> int:
    """Serve ``settings`` in this process, or in ``settings.workers`` processes."""
    from gateway.server import run_event_loop, serve, serve_workers
    from gateway.store.replication import NoSynchronousStandby

    with contextlib.suppress(KeyboardInterrupt):
        try:
            if settings.workers > 1:
                serve_workers(settings, simulator_argv=[sys.executable, *SIMULATOR_ARGV])
            else:
                run_event_loop(serve(settings))
        except NoSynchronousStandby as exc:
            print(f"onejob serve: {exc}", file=sys.stderr)
            return EXIT_NO_STANDBY
    return 0
