"""The ``onejob sim`` command: run the provider simulator as a process.

This is a composition root: it hands the simulator the contract catalog, so the simulator
itself never imports ``contracts``.
"""

from __future__ import annotations

import argparse
from typing import Any

from providers.simulator.profiles import Profile

DEFAULT_PORT = 8765


def _profile_pair(text: str) -> tuple[str, str]:
    name, sep, profile = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected PROVIDER=PROFILE, got {text!r}")
    try:
        return name, Profile(profile).value
    except ValueError:
        known = ", ".join(p.value for p in Profile)
        raise argparse.ArgumentTypeError(f"unknown profile {profile!r} (known: {known})") from None


def contract_catalog() -> Any:
    """Load the bundled contract catalog (what the simulator answers from)."""
    from contracts.loader import load_catalog

    return load_catalog()


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``sim serve`` to the ``onejob`` command line."""
    sim = subparsers.add_parser("sim", help="the provider simulator")
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
    serve.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    """Serve the simulator until interrupted; return the exit code."""
    from providers.simulator.server import serve

    serve(
        host=args.host,
        port=args.port,
        profiles=dict(args.profile),
        default_profile=args.default_profile,
        log_level=args.log_level,
        catalog=contract_catalog,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run ``sim`` without the rest of the CLI (``python -m providers.sim_cli sim serve``)."""
    parser = argparse.ArgumentParser(prog="onejob")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
