"""Serve one gateway for the benchmark, from settings given as JSON.

``python -m bench.processes.gateway_from_settings --settings S.json`` runs ``onejob
serve``'s own ``cli.serve.serve_settings`` (migrate, then serve ``create_app`` with its
dispatcher, LISTEN relay on PostgreSQL and ``/metrics``), but with the exact ``Settings``
the benchmark built, with no TOML round trip.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cli.serve import serve_settings
from gateway.logging import configure_logging
from gateway.settings import Settings


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and serve."""
    parser = argparse.ArgumentParser(prog="python -m bench.processes.gateway_from_settings")
    parser.add_argument("--settings", required=True, help="Settings as a JSON file")
    parser.add_argument("--workers", type=int, help="overrides the settings' (0: sized)")
    args = parser.parse_args(argv)
    data = json.loads(Path(args.settings).read_text(encoding="utf-8"))
    if args.workers is not None:
        data["workers"] = args.workers
    settings = Settings.model_validate(data)
    configure_logging(settings.log_level)
    return serve_settings(settings)


if __name__ == "__main__":
    sys.exit(main())
