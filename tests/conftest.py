"""Shared fixtures: one test body, every database (SQLite and PostgreSQL).

``database_url`` gives each test a fresh migrated database. PostgreSQL databases are
cloned from a per-worker template migrated once (``CREATE DATABASE ... TEMPLATE``), SQLite
files are copied from a migrated file, so migrations run once per worker, not per test.
PostgreSQL tests skip when the server is unreachable, except under
``ONEJOB_REQUIRE_POSTGRES=1`` (CI), where they fail.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import os
import shutil
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy.engine import make_url

from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import SqlJobStore, open_store, upgrade_database
from scenarios.pgbouncer import PgBouncer, pgbouncer_binary, start_pgbouncer

T = TypeVar("T")

PG_URL = os.environ.get(
    "ONEJOB_TEST_DATABASE_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
REQUIRE_PG = os.environ.get("ONEJOB_REQUIRE_POSTGRES") == "1"
_counter = itertools.count()
#: Tells apart the template databases of two checkouts testing on one server at once.
CHECKOUT = hashlib.sha256(str(Path(__file__).resolve().parent).encode()).hexdigest()[:8]


def run_sync(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion on a private loop in a worker thread."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(factory())).result()


def _worker(request: pytest.FixtureRequest) -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def _pg_dsn(database: str | None = None) -> str:
    url = make_url(PG_URL)
    if database is not None:
        url = url.set(database=database)
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def _pg_url(database: str) -> str:
    return make_url(PG_URL).set(database=database).render_as_string(hide_password=False)


async def _pg_admin(*statements: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(_pg_dsn(), timeout=5)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture(autouse=True)
def _shortcuts_for_what_is_tested(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test of a shortcut itself (``@pytest.mark.shortcut``) runs with the shortcuts on,
    also in the run that turns them off (``ONEJOB_SHORTCUTS=off``, .ci/run): that run
    checks that everything else holds on the plain library path."""
    if request.node.get_closest_marker("shortcut") is not None:
        monkeypatch.delenv("ONEJOB_SHORTCUTS", raising=False)


@pytest.fixture(scope="session")
def postgres_template(request: pytest.FixtureRequest) -> str:
    """Create and migrate this worker's template database once; return its name."""
    name = f"onejob_tpl_{CHECKOUT}_{_worker(request)}"
    try:
        run_sync(
            lambda: _pg_admin(
                f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", f"CREATE DATABASE {name}"
            )
        )
    except (OSError, Exception) as exc:  # asyncpg raises many kinds when unreachable
        if REQUIRE_PG:
            pytest.fail(f"PostgreSQL required (ONEJOB_REQUIRE_POSTGRES=1) but unreachable: {exc}")
        pytest.skip(f"PostgreSQL unreachable at {PG_URL}: {exc}")
    run_sync(lambda: upgrade_database(_pg_url(name)))
    return name


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Migrate one SQLite file per worker; tests get copies."""
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    run_sync(lambda: upgrade_database(f"sqlite+aiosqlite:///{path}"))
    return path


#: Where the database tests also run through PgBouncer in transaction mode (issue 46):
#: the store's, and a representative set of the API's and the dispatcher's.
THROUGH_PGBOUNCER = (
    "tests/integration/store/",
    "tests/integration/http/test_job_creation_api.py",
    "tests/integration/http/test_reading_api.py",
    "tests/integration/http/test_attempts_and_admin_api.py",
    "tests/integration/http/test_admin_jobs.py",
    "tests/integration/http/test_job_lookup.py",
    "tests/integration/http/test_event_stream.py",
    "tests/integration/dispatch/test_dispatch_flows.py",
    "tests/integration/dispatch/test_first_attempt_in_process.py",
    "tests/integration/dispatch/test_dispatch_processes.py",
)
#: ... but not these, which test what a direct connection does with its server backend,
#: found by its PID (PgBouncer shows its clients a stand-in PID): terminating a pooled
#: connection's backend, the pool's count of backends, the echo filter of own NOTIFYs
#: (off behind a pooler: tests/integration/store/test_through_pgbouncer.py).
NOT_THROUGH_PGBOUNCER = (
    "tests/integration/store/test_pg_checkout.py",
    "tests/integration/store/test_own_notifications.py",
    "tests/integration/store/test_wakeups_after_commit.py::"
    "test_a_lost_wake_up_connection_is_replaced_and_its_backend_forgotten",
    # Open (issue 46): fifty identical creations at once through PgBouncer's 10 server
    # connections ran into the 5 s statement deadline in one CI run of three (and once
    # under load before); not yet explained. The direct variant runs on.
    "tests/integration/store/test_creation.py::"
    "test_fifty_concurrent_identical_creations_make_one_job",
)
DATABASES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
THROUGH_POOLER = pytest.param("pgbouncer", marks=pytest.mark.postgres)


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Give the tests ``THROUGH_PGBOUNCER`` names a third database: PostgreSQL through
    PgBouncer (before the fixture's own parameters are applied, which this replaces)."""
    if "database_url" not in metafunc.fixturenames or any(
        "database_url" in str(mark.args[0])
        for mark in metafunc.definition.iter_markers("parametrize")
    ):
        return  # a test that chose its databases keeps them
    where = metafunc.definition.nodeid
    if where.startswith(THROUGH_PGBOUNCER) and not where.startswith(NOT_THROUGH_PGBOUNCER):
        three = [*DATABASES, THROUGH_POOLER]
        metafunc.definition.add_marker(
            pytest.mark.parametrize("database_url", three, indirect=True)
        )


@pytest.fixture(scope="session")
def pgbouncer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgBouncer]:
    """Start this worker's PgBouncer (transaction mode) in front of PostgreSQL; stop it at
    the end. Skipped when pgbouncer is not installed, failed under ONEJOB_REQUIRE_POSTGRES."""
    binary = pgbouncer_binary()
    if binary is None:
        reason = "pgbouncer is not installed (Debian: apt-get install pgbouncer)"
        if REQUIRE_PG:
            pytest.fail(f"PgBouncer required (ONEJOB_REQUIRE_POSTGRES=1): {reason}")
        pytest.skip(f"{reason}: the tests through a transaction pooler are skipped")
    bouncer = start_pgbouncer(binary, tmp_path_factory.mktemp("pgbouncer"), PG_URL)
    try:
        yield bouncer
    finally:
        bouncer.stop()


@pytest.fixture(params=DATABASES)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Return the URL of a fresh, migrated database (SQLite file or PostgreSQL clone).

    ``pgbouncer`` (``THROUGH_PGBOUNCER``): the clone through PgBouncer in transaction
    mode, with ``ONEJOB_DATABASE_POOLER=transaction`` and the direct URL as
    ``ONEJOB_DATABASE_LISTEN_URL`` for every store and process the test opens."""
    if request.param == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        path = tmp_path / "onejob.db"
        shutil.copyfile(template, path)
        yield f"sqlite+aiosqlite:///{path}"
        return
    template_name: str = request.getfixturevalue("postgres_template")
    name = f"onejob_t_{_worker(request)}_{os.getpid()}_{next(_counter)}"
    run_sync(lambda: _pg_admin(f"CREATE DATABASE {name} TEMPLATE {template_name}"))
    try:
        if request.param == "pgbouncer":
            bouncer: PgBouncer = request.getfixturevalue("pgbouncer")
            env: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
            env.setenv("ONEJOB_DATABASE_POOLER", "transaction")
            env.setenv("ONEJOB_DATABASE_LISTEN_URL", _pg_url(name))
            yield bouncer.url(_pg_url(name))
        else:
            yield _pg_url(name)
    finally:
        run_sync(lambda: _pg_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[SqlJobStore]:
    """Open a store on the fresh database."""
    s = await open_store(
        database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        yield s
    finally:
        await s.close()
