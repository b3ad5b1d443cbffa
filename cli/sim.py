"""``onejob sim serve``: run the provider simulator as a process.

The simulator never imports ``contracts``: this command hands it the contract catalog
(``contracts.loader.load_catalog``), loaded once at start-up.
"""

from __future__ import annotations

import argparse
import sys

from cli.arguments import Subcommands

COMMANDS = {"sim": "the provider simulator"}
DEFAULT_PORT = 8765
EXIT_PORT_TAKEN = 2


def _profile_pair(text: str) -> tuple[str, str]:
    from providers.simulator.profiles import Profile

    name, sep, profile = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected PROVIDER=PROFILE, got {text!r}")
    try:
        return name, Profile(profile).value
    except ValueError:
        known = ", ".join(p.value for p in Profile)
        raise argparse.ArgumentTypeError(f"unknown profile {profile!r} (known: {known})") from None


def register(subcommands: Subcommands) -> None:
    """Add ``onejob sim serve``."""
    from providers.simulator.profiles import Profile

    sim = subcommands.add_parser("sim", help=COMMANDS["sim"])
    sim_sub = sim.add_subparsers(dest="sim_command", required=True)
    serve = sim_sub.add_parser(
        "serve",
        help="serve simulated OpenAI, Anthropic and Gemini APIs",
        description="Serve simulated provider APIs; see docs/simulator.md.",
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    serve.add_argument(
        "--profile",
        action="append",
        type=_profile_pair,
        default=[],
        metavar="PROVIDER=PROFILE",
        help="profile of one simulated provider (repeatable)",
    )
    serve.add_argument(
        "--default-profile",
        default=Profile.FAITHFUL.value,
        choices=[p.value for p in Profile],
        help="profile of providers not named by --profile",
    )
    serve.add_argument("--log-level", default="info")
    serve.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="json: one JSON object per stderr line, as onejob serve writes (its bundled "
        "simulator's)",
    )
    serve.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    """Serve the simulator until interrupted; return the exit code."""
    from contracts.loader import load_catalog
    from providers.simulator.server import port_refusal, serve

    if args.log_format == "json":
        from gateway.logging import configure_logging

        configure_logging(args.log_level)
    if refusal := port_refusal(args.host, args.port):
        print(
            f"onejob sim serve: cannot listen on {args.host}:{args.port} ({refusal}); "
            "choose another --port (0 picks a free one)",
            file=sys.stderr,
        )
        return EXIT_PORT_TAKEN
    serve(
        host=args.host,
        port=args.port,
        profiles=dict(args.profile),
        default_profile=args.default_profile,
        log_level=args.log_level,
        catalog=load_catalog,
    )
    return 0
