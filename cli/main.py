"""The ``onejob`` command line: every command module, registered by name.

``onejob --help`` lists the commands without building them; only the command being run
adds its arguments (importing what they need), so a simulator or a worker starts without
importing the contract suite or the scenario runner.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Protocol

from cli import certify, database, reconcile, scenarios, serve, sim, worker
from cli.arguments import Subcommands

EXIT_INTERRUPTED = 130  # the shell's code for "stopped by a signal"


class CommandModule(Protocol):
    """A module of the CLI: its commands (name -> help) and how it adds them."""

    @property
    def COMMANDS(self) -> Mapping[str, str]: ...  # a module constant: upper case

    def register(self, subcommands: Subcommands) -> None: ...


#: Every command module, in the order ``onejob --help`` lists their commands.
MODULES: tuple[CommandModule, ...] = (serve, database, worker, reconcile, sim, certify, scenarios)


def _command_in(argv: Sequence[str] | None) -> str | None:
    """Return the command ``argv`` names (its first word not an option), if any."""
    words = sys.argv[1:] if argv is None else argv
    return next((word for word in words if not word.startswith("-")), None)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """Build the parser: every command listed, the one ``argv`` runs with its arguments."""
    parser = argparse.ArgumentParser(
        prog="onejob", description="Keep one user intention as one job."
    )
    subcommands = parser.add_subparsers(dest="command", required=True)
    command = _command_in(argv)
    for module in MODULES:
        if command in module.COMMANDS:
            module.register(subcommands)
        else:
            for name, summary in module.COMMANDS.items():
                subcommands.add_parser(name, help=summary)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    args = build_parser(argv).parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
