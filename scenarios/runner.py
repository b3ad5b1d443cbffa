"""The scenario registry and the runner that turns each scenario into a ``ScenarioResult``."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import os
import shutil
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from scenarios.certs import CERTIFY_TIMEOUT, STAND_IN_NOTE, certify_args, write_stand_in_registry
from scenarios.context import ScenarioContext, ScenarioFailure, ScenarioSkipped, log_dir_for
from scenarios.harness import Harness, HarnessError
from scenarios.model import DEFAULT_JOBS, DEFAULT_REPORT_DIR, RunReport, ScenarioResult, Verdict
from scenarios.registry import ScenarioSpec, all_scenarios
from scenarios.setup import GatewayConfig, database_kind

CAPTURE_TIMEOUT = 15.0  # seconds to read the watched jobs' timelines after a scenario
#: Where a PostgreSQL-only scenario finds its database when the run itself is on SQLite.
POSTGRES_ENV = ("ONEJOB_SCENARIO_POSTGRES_URL", "ONEJOB_TEST_DATABASE_URL")
#: Why a scenario that builds its own world around PostgreSQL is skipped on SQLite.
RUNS_IN_THE_POSTGRESQL_RUN = "runs in the run on PostgreSQL (--database-url postgresql+asyncpg://…)"


@dataclasses.dataclass(slots=True)
class RunOptions:
    """How a run is set up."""

    report_dir: Path = DEFAULT_REPORT_DIR
    #: The run's database (None: a fresh SQLite file per scenario).
    database_url: str | None = None
    #: PostgreSQL for scenarios that need it when ``database_url`` is SQLite.
    postgres_url: str | None = None
    #: Replaces the ``onejob`` command (test-only: runs scenarios against a broken build).
    onejob_argv: list[str] | None = None
    #: Scenarios run at once (each has its own processes and database).
    jobs: int = DEFAULT_JOBS

    def __post_init__(self) -> None:
        if self.postgres_url is None:
            if database_kind(self.database_url) == "postgresql":
                self.postgres_url = self.database_url
            else:
                self.postgres_url = next(
                    (os.environ[v] for v in POSTGRES_ENV if os.environ.get(v)), None
                )


class _Certifier:
    """Certify the simulated providers once per run, with the real ``onejob certify``."""

    def __init__(self, options: RunOptions) -> None:
        self._options = options
        self._lock = asyncio.Lock()
        self._path: Path | None = None
        self._error: str | None = None
        self.note: str | None = None  #: set when stand-in certificates were used

    async def registry(self, ctx: ScenarioContext) -> Path:
        """Return a copy of the run's certified registry for ``ctx``."""
        async with self._lock:
            if self._path is None and self._error is None:
                await self._certify()
        if self._error is not None:
            raise HarnessError(f"certifying the simulated providers failed: {self._error}")
        assert self._path is not None
        if self.note:
            ctx.note(self.note)
        copy = ctx.harness.work_dir / "certifications.json"
        shutil.copyfile(self._path, copy)
        return copy

    async def _certify(self) -> None:
        work = self._options.report_dir / "work" / "_certify"
        harness = Harness(
            work, log_dir_for(self._options.report_dir, "_certify"), self._options.onejob_argv
        )
        try:
            sim = await harness.start_simulator()
            config = GatewayConfig(sim.port, work / "certifications.json")
            path = config.write(work / "certify.toml")
            registry = work / "certifications.json"
            registry.unlink(missing_ok=True)
            code, out, err = await harness.run_cli(
                *certify_args(path, registry, work / "certify-report"),
                timeout=CERTIFY_TIMEOUT,
            )
            if code == 2 and "invalid choice: 'certify'" in err:
                self._path = write_stand_in_registry(registry)
                self.note = STAND_IN_NOTE
            elif code != 0 or not registry.exists():
                self._error = f"exit {code}: {(err or out)[-800:]}"
            else:
                self._path = registry
        except HarnessError as exc:
            self._error = str(exc)
        finally:
            await harness.close()


async def run_scenario(
    spec: ScenarioSpec, options: RunOptions, certifier: _Certifier | None = None
) -> ScenarioResult:
    """Run one scenario against fresh processes and return its result (never raises)."""
    certifier = certifier or _Certifier(options)
    database_url = options.postgres_url if spec.needs_postgres else options.database_url
    work = options.report_dir / "work" / spec.name
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(log_dir_for(options.report_dir, spec.name), ignore_errors=True)
    harness = Harness(work, log_dir_for(options.report_dir, spec.name), options.onejob_argv)
    ctx = ScenarioContext(spec.name, harness, database_url, certifier.registry)
    started = time.monotonic()
    verdict, reason = Verdict.PASS, ""
    try:
        if spec.postgres_run_only and database_kind(options.database_url) != "postgresql":
            raise ScenarioSkipped(RUNS_IN_THE_POSTGRESQL_RUN)
        if spec.needs_postgres and database_kind(database_url) != "postgresql":
            raise ScenarioSkipped(
                "needs PostgreSQL: pass --database-url postgresql+asyncpg://… or set "
                + " / ".join(POSTGRES_ENV)
            )
        await asyncio.wait_for(spec.body(ctx), spec.timeout)
        reason = f"{len(ctx.checks)} checks held"
    except ScenarioFailure as exc:
        verdict, reason = Verdict.FAIL, str(exc)
    except ScenarioSkipped as exc:
        verdict, reason = Verdict.SKIP, str(exc)
    except TimeoutError:
        verdict, reason = Verdict.ERROR, f"did not finish within {spec.timeout:.0f} s"
    except HarnessError as exc:
        verdict, reason = Verdict.ERROR, str(exc)
    except Exception as exc:
        verdict = Verdict.ERROR
        reason = f"{type(exc).__name__}: {exc}"
        ctx.note(traceback.format_exc(limit=8))
    finally:
        try:
            await asyncio.wait_for(ctx.capture_watched(), CAPTURE_TIMEOUT)
        except Exception as exc:  # the verdict stands even if the timeline cannot be read
            ctx.note(f"timeline capture failed: {type(exc).__name__}: {exc}")
        await ctx.close()
    return ScenarioResult(
        name=spec.name,
        title=spec.title,
        verdict=verdict,
        reason=reason,
        duration=time.monotonic() - started,
        database=ctx.db_kind,
        checks=ctx.checks,
        timeline=sorted(ctx.timeline, key=lambda m: (m.at, m.lane)),
        exchanges=ctx.exchanges,
        timeline_source=ctx.timeline_source,
        notes=ctx.notes,
        logs=harness.logs(),
    )


async def run_scenarios(
    names: Sequence[str],
    options: RunOptions,
    progress: Callable[[int, int, ScenarioResult], None] | None = None,
) -> RunReport:
    """Run the named scenarios (all when empty), ``options.jobs`` at a time, in catalog order."""
    registry = all_scenarios()
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise KeyError(f"unknown scenarios: {', '.join(unknown)} (known: {', '.join(registry)})")
    chosen = [registry[n] for n in (names or list(registry))]
    started_at = dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")
    started = time.monotonic()
    certifier = _Certifier(options)
    slots = asyncio.Semaphore(max(1, options.jobs))
    done = 0

    async def one(spec: ScenarioSpec) -> ScenarioResult:
        nonlocal done
        async with slots:
            result = await run_scenario(spec, options, certifier)
        done += 1
        if progress is not None:
            progress(done, len(chosen), result)
        return result

    results = list(await asyncio.gather(*(one(spec) for spec in chosen)))
    return RunReport(
        results=results,
        started_at=started_at,
        duration=time.monotonic() - started,
        database=database_kind(options.database_url),
    )
