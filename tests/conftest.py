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

from gateway.settings import ShortcutsConfig
from gateway.store import SqlJobStore, open_store, upgrade_database

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


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Return the URL of a fresh, migrated database (SQLite file or PostgreSQL clone)."""
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
        yield _pg_url(name)
    finally:
        run_sync(lambda: _pg_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[SqlJobStore]:
    """Open a store on the fresh database."""
    s = await open_store(database_url, shortcuts=ShortcutsConfig.from_env())
    try:
        yield s
    finally:
        await s.close()
