"""The ``onejob`` command line: every command module, registered by name.

``onejob --help`` lists the commands without building them; only the command being run
adds its arguments (importing what they need), so a simulator or a worker starts without
importing the contract suite or the scenario runner.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Mapping, Sequence
from typing import Protocol

from cli import certify, database, reconcile, scenarios, serve, sim, worker
from cli.arguments import Subcommands
from cli.pipes import tolerate_closed_stdout

EXIT_INTERRUPTED = 130  # the shell's code for "stopped by a signal"
EXIT_CANNOT_START = 2  # the settings or the database refused: nothing ran


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
    parser.add_argument("--version", action="version", version=f"onejob {version()}")
    subcommands = parser.add_subparsers(dest="command", required=True)
    command = _command_in(argv)
    for module in MODULES:
        if command in module.COMMANDS:
            module.register(subcommands)
        else:
            for name, summary in module.COMMANDS.items():
                subcommands.add_parser(name, help=summary)
    return parser


def version() -> str:
    """Return the installed distribution's version."""
    try:
        return importlib.metadata.version("onejob")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout not installed
        return "unknown"


def _command_words(args: argparse.Namespace) -> str:
    """Return the command as typed: ``keys create``, ``serve``."""
    names = ("command", "db_command", "keys_command", "jobs_command", "sim_command")
    return " ".join(str(getattr(args, name)) for name in names if getattr(args, name, None))


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    from cli.errors import explain

    args = build_parser(argv).parse_args(argv)
    try:
        with tolerate_closed_stdout():
            return int(args.func(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:
        if (line := explain(exc)) is None:
            raise
        print(f"onejob {_command_words(args)}: {line}", file=sys.stderr)
        return EXIT_CANNOT_START
