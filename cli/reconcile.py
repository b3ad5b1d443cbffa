"""``onejob reconcile``: one reconciler pass, for operators and cron.

It asks every provider configured with ``reconcile = true`` about the ``unknown`` attempts
past their grace period, prints a line per attempt and a summary on stderr, and exits
0 (the pass ran), 1 (some lookups failed: those attempts were not asked about), or 2
(nothing can be asked: no provider reconciles, or the database is not migrated).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, TextIO

from cli.arguments import Subcommands, add_settings_args, settings_from

if TYPE_CHECKING:
    from gateway.reconciler import Check, PassSummary
    from gateway.settings import Settings

COMMANDS = {
    "reconcile": "ask providers once about unknown attempts, and resolve those with evidence"
}
EXIT_LOOKUPS_FAILED = 1
EXIT_CANNOT_ASK = 2


def register(subcommands: Subcommands) -> None:
    """Add ``onejob reconcile``."""
    parser = subcommands.add_parser("reconcile", help=COMMANDS["reconcile"])
    add_settings_args(parser)
    parser.add_argument(
        "--grace",
        type=float,
        help="seconds past an attempt's deadline before asking (default: [reconciler] grace)",
    )
    parser.set_defaults(func=cmd_reconcile)


def cmd_reconcile(args: argparse.Namespace) -> int:
    """Run one pass; return the exit code."""
    from gateway.logging import configure_logging

    settings = settings_from(args)
    configure_logging(settings.log_level)
    return asyncio.run(run_reconcile(settings, grace=args.grace))


async def run_reconcile(
    settings: Settings, *, grace: float | None = None, out: TextIO | None = None
) -> int:
    """Ask once about every due unknown attempt; print progress and a summary."""
    from gateway.bootstrap import reconciler_pass
    from gateway.metrics import ReconcileOutcome
    from gateway.store import database_is_current

    out = out or sys.stderr
    names = settings.reconcilable_providers()
    if not names:
        print(
            "onejob reconcile: no provider has reconcile = true; nothing can be asked "
            "(see docs/operations.md)",
            file=out,
        )
        return EXIT_CANNOT_ASK
    if not await database_is_current(settings.database_url):
        print(
            "onejob reconcile: the database is not at the newest schema; "
            "run `onejob db upgrade` first",
            file=out,
        )
        return EXIT_CANNOT_ASK
    async with reconciler_pass(settings, names) as reconciler:
        print(f"asking {', '.join(names)} about unknown attempts", file=out, flush=True)
        summary = await reconciler.run_once(
            grace=grace, progress=lambda check: print(progress_line(check), file=out)
        )
    print(summary_line(summary), file=out)
    failed = summary.counts().get(ReconcileOutcome.LOOKUP_FAILED.value, 0)
    return EXIT_LOOKUPS_FAILED if failed else 0


def progress_line(check: Check) -> str:
    """Describe one check in a line."""
    a = check.attempt
    line = f"  {a.id} (job {a.job_id}, #{a.number} on {a.provider}): {check.outcome.value}"
    if completion := check.finding.get("completion_id"):
        line += f", completion {completion}"
    if message := check.finding.get("message"):
        line += f" ({message})"
    return line


def summary_line(summary: PassSummary) -> str:
    """Summarize a pass in a line."""
    counts = summary.counts()
    if not counts:
        return "checked 0 unknown attempts (none due)"
    parts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
    return f"checked {len(summary.checks)} unknown attempt(s): {parts}"
