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
from typing import Any, TextIO

from gateway.logging import configure_logging
from gateway.metrics import Metrics, ReconcileOutcome
from gateway.reconciler import Check, PassSummary
from gateway.settings import Settings, load_settings

EXIT_LOOKUPS_FAILED = 1
EXIT_CANNOT_ASK = 2


def register(subparsers: Any) -> None:
    """Add ``onejob reconcile`` to the command line."""
    parser = subparsers.add_parser(
        "reconcile",
        help="ask providers once about unknown attempts, and resolve those with evidence",
    )
    parser.add_argument("--config", help="path of onejob.toml (default: $ONEJOB_CONFIG)")
    parser.add_argument("--database-url", help="overrides $ONEJOB_DATABASE_URL")
    parser.add_argument(
        "--grace",
        type=float,
        help="seconds past an attempt's deadline before asking (default: [reconciler] grace)",
    )
    parser.set_defaults(func=cmd_reconcile)


def cmd_reconcile(args: argparse.Namespace) -> int:
    """Run one pass; return the exit code."""
    settings = load_settings(args.config, database_url=args.database_url)
    configure_logging(settings.log_level)
    return asyncio.run(run_reconcile(settings, grace=args.grace))


async def run_reconcile(
    settings: Settings, *, grace: float | None = None, out: TextIO | None = None
) -> int:
    """Ask once about every due unknown attempt; print progress and a summary."""
    import httpx

    from contracts.loader import load_catalog
    from contracts.registry import CertificationRegistry
    from gateway.dispatch.wiring import build_reconciler
    from gateway.store import database_is_current, open_store
    from providers.factory import build_provider

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
    store = await open_store(settings.database_url)
    try:
        async with httpx.AsyncClient() as client:
            reconciler = build_reconciler(
                settings,
                store=store,
                providers={n: build_provider(settings.providers[n], client) for n in names},
                catalog=load_catalog(),
                certifications=CertificationRegistry(settings.certifications_path),
                metrics=Metrics(),
            )
            print(f"asking {', '.join(names)} about unknown attempts", file=out, flush=True)
            summary = await reconciler.run_once(
                grace=grace, progress=lambda check: print(progress_line(check), file=out)
            )
    finally:
        await store.close()
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
