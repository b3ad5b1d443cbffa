"""Run the scenarios once per database through the CLI's entry point; tests read verdicts."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from cli.scenarios import run_and_report
from scenarios.runner import RunOptions

PG_URL = os.environ.get(
    "ONEJOB_TEST_DATABASE_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
BROKEN_ONEJOB = [sys.executable, str(Path(__file__).with_name("broken_onejob.py"))]
#: Where CI wants the acceptance runs' reports published (``.ci/run`` sets it).
PUBLISH_DIR = os.environ.get("ONEJOB_SCENARIO_REPORT_DIR")


def report_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """Return the run's report folder: published under CI, temporary otherwise."""
    if PUBLISH_DIR:
        path = Path(PUBLISH_DIR) / name
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp(name)


def postgres_reachable() -> bool:
    """Say whether the test PostgreSQL answers."""
    import asyncpg

    async def probe() -> bool:
        try:
            conn = await asyncpg.connect(PG_URL.replace("+asyncpg", ""), timeout=3)
        except (OSError, asyncpg.PostgresError):
            return False
        await conn.close()
        return True

    return asyncio.run(probe())


def run_cli_entry(names: list[str], options: RunOptions) -> tuple[int, str, dict[str, Any]]:
    """Run ``onejob scenarios run`` in-process; return exit code, output and scenarios.json."""
    out = io.StringIO()
    code = asyncio.run(run_and_report(names, options, out))
    report = json.loads((options.report_dir / "latest" / "scenarios.json").read_bytes())
    return code, out.getvalue(), report


@pytest.fixture(scope="session")
def sqlite_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, dict[str, Any]]:
    """Every scenario on SQLite (the PostgreSQL-only one on the test PostgreSQL if up)."""
    options = RunOptions(report_dir=report_dir(tmp_path_factory, "scenarios-sqlite"))
    reachable = postgres_reachable() or os.environ.get("ONEJOB_REQUIRE_POSTGRES") == "1"
    options.postgres_url = PG_URL if reachable else None
    return run_cli_entry([], options)


@pytest.fixture(scope="session")
def postgres_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, dict[str, Any]]:
    """Every scenario on PostgreSQL (skips when it is unreachable)."""
    if not postgres_reachable():
        if os.environ.get("ONEJOB_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL at {PG_URL} is unreachable (ONEJOB_REQUIRE_POSTGRES=1)")
        pytest.skip(f"PostgreSQL at {PG_URL} is unreachable")
    options = RunOptions(
        report_dir=report_dir(tmp_path_factory, "scenarios-postgresql"), database_url=PG_URL
    )
    return run_cli_entry([], options)


@pytest.fixture
def run_broken(tmp_path: Path) -> Any:
    """Return a function that runs one scenario against the broken ``onejob``."""

    def run(name: str) -> tuple[int, str, dict[str, Any]]:
        options = RunOptions(report_dir=tmp_path, onejob_argv=BROKEN_ONEJOB)
        return run_cli_entry([name], options)

    return run
