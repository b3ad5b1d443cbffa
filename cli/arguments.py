"""The arguments the commands share: where the settings come from, and reading them."""

from __future__ import annotations

import argparse
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
