"""``onejob scenarios run|list``: replay the break points and write the reports."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import shutil
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from cli.arguments import Subcommands
from reports.lines import clipped

if TYPE_CHECKING:
    from scenarios.model import RunReport, ScenarioResult
    from scenarios.runner import RunOptions

COMMANDS = {"scenarios": "replay the break points against real processes"}
EXIT_BAD_NAME = 2
EXIT_INTERRUPTED = 130  # the shell's code for "stopped by a signal"


def _cancel_on_signals() -> None:
    """Turn SIGTERM and SIGINT into a cancellation, so every harness stops its processes."""
    task = asyncio.current_task()
    if task is None:
        return
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, task.cancel)


def register(subcommands: Subcommands) -> None:
    """Add ``onejob scenarios run`` and ``onejob scenarios list``."""
    from scenarios.model import DEFAULT_JOBS, DEFAULT_REPORT_DIR

    parser = subcommands.add_parser("scenarios", help=COMMANDS["scenarios"])
    sub = parser.add_subparsers(dest="scenarios_command", required=True)
    run = sub.add_parser("run", help="run scenarios and write the reports")
    run.add_argument("names", nargs="*", metavar="NAME", help="scenarios to run (default: all)")
    run.add_argument(
        "--database-url",
        default=None,
        help="run the gateways on this database (default: a fresh SQLite file per scenario); "
        "a PostgreSQL URL gets a fresh database per scenario",
    )
    run.add_argument(
        "--report-dir",
        type=Path,
        default=DEFAULT_REPORT_DIR,
        help="each run's reports and process logs go to a folder of its own, "
        f"REPORT_DIR/runs/<run id>/, with REPORT_DIR/latest and REPORT_DIR/index.html "
        f"(default: {DEFAULT_REPORT_DIR})",
    )
    run.add_argument(
        "--jobs",
        type=int,
        default=DEFAULT_JOBS,
        help=f"scenarios run at once, each with its own processes (default: {DEFAULT_JOBS})",
    )
    run.set_defaults(func=run_command)
    listing = sub.add_parser("list", help="list the scenarios")
    listing.set_defaults(func=list_command)


def list_command(args: argparse.Namespace) -> int:
    """Print every scenario's name and title."""
    from scenarios.registry import all_scenarios

    for spec in all_scenarios().values():
        pg = "  (PostgreSQL)" if spec.needs_postgres else ""
        print(f"{spec.name:32} {spec.title}{pg}")
    return 0


def progress_line(index: int, total: int, result: ScenarioResult) -> str:
    """Return the one line printed when a scenario ends."""
    from scenarios.model import Verdict

    line = f"[{index:>2}/{total}] {result.name:32} {result.verdict.value:5} {result.duration:6.1f}s"
    if result.verdict is not Verdict.PASS:
        line += f"  {clipped(result.reason.splitlines()[0], 160) if result.reason else ''}"
    return line


def summary_table(report: RunReport) -> str:
    """Return the plain-text summary printed at the end of a run."""
    width = max([len(r.name) for r in report.results] + [8])
    lines = [f"{'scenario':{width}}  verdict  seconds  reason", "-" * (width + 40)]
    for r in report.results:
        reason = clipped(r.reason.splitlines()[0], 100) if r.reason else ""
        lines.append(f"{r.name:{width}}  {r.verdict.value:7}  {r.duration:7.1f}  {reason}")
    counts = ", ".join(f"{n} {v}" for v, n in report.counts().items() if n)
    lines.append("-" * (width + 40))
    lines.append(
        f"{len(report.results)} scenarios ({counts}) in {report.duration:.1f} s "
        f"on {report.database}"
    )
    return "\n".join(lines)


def run_command(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run the scenarios, print progress and a summary, write the reports; 1 on any failure."""
    from scenarios.runner import RunOptions

    out = out or sys.stdout
    options = RunOptions(report_dir=args.report_dir, database_url=args.database_url, jobs=args.jobs)
    return asyncio.run(run_and_report(list(args.names), options, out))


async def run_and_report(names: list[str], options: RunOptions, out: TextIO) -> int:
    """Run scenarios in a new run folder under ``options.report_dir``, write every report
    format there, point ``latest`` at it and rewrite the index; return the exit code."""
    from reports.scenario_reports import write_reports
    from reports.scenario_runs import new_run_dir, publish
    from scenarios.runner import run_scenarios

    def progress(index: int, total: int, result: ScenarioResult) -> None:
        print(progress_line(index, total, result), file=out, flush=True)

    _cancel_on_signals()
    run_dir = new_run_dir(options.report_dir)
    try:
        report = await run_scenarios(
            names, dataclasses.replace(options, report_dir=run_dir), progress
        )
    except KeyError as exc:
        shutil.rmtree(run_dir, ignore_errors=True)
        print(f"error: {exc.args[0]}", file=out)
        return EXIT_BAD_NAME
    except asyncio.CancelledError:
        # Each scenario's `finally` has stopped its processes and dropped its database.
        print(
            f"interrupted: every scenario process was stopped; no reports written "
            f"(process logs in {run_dir})",
            file=out,
        )
        return EXIT_INTERRUPTED
    paths = write_reports(report, run_dir)
    published = publish(options.report_dir, run_dir)
    print(file=out)
    print(summary_table(report), file=out)
    print("reports: " + ", ".join(str(p) for p in paths.values()), file=out)
    print(
        f"every run: {published['index_html']} ({published['latest']} is this one)",
        file=out,
        flush=True,
    )
    return 0 if report.passed else 1
