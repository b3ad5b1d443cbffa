"""The arguments the commands share: where the settings come from, and reading them."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from gateway.settings import Settings

#: What ``add_subparsers`` returns: each command module adds its commands to it.
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def add_settings_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--config`` and ``--database-url``."""
    parser.add_argument("--config", help="path of onejob.toml (default: $ONEJOB_CONFIG)")
    parser.add_argument("--database-url", help="overrides $ONEJOB_DATABASE_URL")


def settings_from(args: argparse.Namespace, **overrides: Any) -> Settings:
    """Load the settings the file, the environment and ``--database-url`` describe."""
    from gateway.settings import load_settings

    return load_settings(args.config, database_url=args.database_url, **overrides)


def tracing_of(settings: Callable[[], Settings]) -> Any:
    """The tracer the settings' ``[telemetry]`` asks for, to hand to a tool (a certification
    run's ``Spans``); None when it is off or there are no usable settings (``--sim``)."""
    with contextlib.suppress(Exception):
        if (telemetry := settings().telemetry).enabled:
            from gateway.bootstrap import build_tracing

            return build_tracing(telemetry)
    return None
