"""A database that drops its connections or becomes unreachable: only 503s, nothing lost.

Clients under load create jobs over a real socket while PostgreSQL terminates the
gateway's backends, or while the SQLite file cannot be opened. Every answer is 201 or
503 ``urn:onejob:unavailable`` with ``Retry-After`` (never the 500 of a bug), and every
job acknowledged with 201 is in the database afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from litestar import Litestar
from sqlalchemy.engine import make_url

from gateway.app import create_app, settings_for_tests
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import open_store, upgrade_database

BODY = b'{"contract": "echo@1", "input": {"n": 1}}'
CLIENTS = 6
_keys = itertools.count()


class Load:
    """``CLIENTS`` clients creating jobs until stopped; pausable between requests."""

    def __init__(self, base_url: str, api_key: str) -> None:
        self.base_url, self.api_key = base_url, api_key
        self.created: list[str] = []
        self.others: list[httpx.Response] = []
        self.stop = asyncio.Event()
        self.running = asyncio.Event()
        self.running.set()
        self.in_flight = 0
        self.idle = asyncio.Event()

    async def run(self) -> None:
        async with httpx.AsyncClient(base_url=self.base_url, timeout=30) as http:
            await asyncio.gather(*(self._client(http) for _ in range(CLIENTS)))

    async def quiet(self) -> None:
        """Hold the clients between requests until none is in flight."""
        self.running.clear()
        if self.in_flight:
            self.idle.clear()
            await self.idle.wait()

    async def _client(self, http: httpx.AsyncClient) -> None:
        while not self.stop.is_set():
            await self.running.wait()
            headers = {
                "Authorization": f"Bearer {self.api_key}",
                "Idempotency-Key": f'"load-{next(_keys)}"',
            }
            self.in_flight += 1
            try:
                r = await http.post("/v1/jobs", content=BODY, headers=headers)
            finally:
                self.in_flight -= 1
                if not self.in_flight:
                    self.idle.set()
            if r.status_code == 201:
                self.created.append(r.json()["id"])
            else:
                self.others.append(r)


def _assert_only_unavailable(others: list[httpx.Response]) -> None:
    for r in others:
        assert r.status_code == 503, (r.status_code, r.text[:300])
        assert r.headers["retry-after"] == "1"
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["type"] == "urn:onejob:unavailable"


async def _assert_all_stored(database_url: str, created: list[str]) -> None:
    store = await open_store(
        database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )  # a fresh pool: none of the killed connections
    try:
        for job_id in created:
            assert await store.get_job(job_id, "alice") is not None, job_id
    finally:
        await store.close()


def _gateway(database_url: str, store: Any, catalog: Any, certifications: Any) -> Litestar:
    return create_app(
        settings_for_tests(database_url=database_url),
        store=store,
        catalog=catalog,
        certifications=certifications,
        background=[],
    )


@pytest.mark.postgres
@pytest.mark.slow
async def test_terminated_postgres_backends_under_load_give_only_503s_and_lose_nothing(
    catalog: Any,
    certifications: Any,
    served: Callable[[Litestar], contextlib.AbstractAsyncContextManager[str]],
    request: pytest.FixtureRequest,
) -> None:
    template = request.getfixturevalue("postgres_template")
    url = make_url(
        os.environ.get(
            "ONEJOB_TEST_DATABASE_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
        )
    )
    name = f"onejob_loss_{os.getpid()}_{next(_keys)}"
    admin_dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    admin = await asyncpg.connect(admin_dsn)
    await admin.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
    database_url = url.set(database=name).render_as_string(hide_password=False)
    store = await open_store(
        database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        _, api_key = await store.create_api_key("alice", frozenset({"jobs"}))
        terminated = 0
        async with served(_gateway(database_url, store, catalog, certifications)) as base:
            load = Load(base, api_key)
            task = asyncio.create_task(load.run())
            for _ in range(8):
                await asyncio.sleep(0.25)
                rows = await admin.fetch(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = $1 AND pid <> pg_backend_pid()",
                    name,
                )
                terminated += len(rows)
            await asyncio.sleep(0.5)  # the gateway recovers: new connections work
            load.stop.set()
            await task
            recovered = len(load.created)
            load.stop.clear()
            task = asyncio.create_task(load.run())
            await asyncio.sleep(0.3)
            load.stop.set()
            await task
        assert terminated > 0
        _assert_only_unavailable(load.others)
        assert load.others, "no request met a terminated connection"
        assert len(load.created) > recovered, "the gateway did not recover"
        await _assert_all_stored(database_url, load.created)
    finally:
        await store.close()
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.close()


@contextlib.asynccontextmanager
async def _switchable_directory(tmp_path: Path) -> AsyncIterator[Callable[[bool], None]]:
    """Yield a switch that makes ``tmp_path/data`` point at the database or at nothing."""
    real, link = tmp_path / "real", tmp_path / "data"
    real.mkdir()
    link.symlink_to(real)

    def reachable(yes: bool) -> None:
        # Swap the link atomically: no moment where SQLite could create a fresh file.
        new = tmp_path / "data.new"
        new.symlink_to(real if yes else tmp_path / "nowhere")
        os.replace(new, link)

    yield reachable


@pytest.mark.slow
async def test_an_unreachable_sqlite_file_under_load_gives_only_503s_and_loses_nothing(
    catalog: Any,
    certifications: Any,
    served: Callable[[Litestar], contextlib.AbstractAsyncContextManager[str]],
    tmp_path: Path,
) -> None:
    async with _switchable_directory(tmp_path) as reachable:
        database_url = f"sqlite+aiosqlite:///{tmp_path / 'data' / 'onejob.db'}"
        await upgrade_database(database_url)
        store = await open_store(
            database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
        )
        try:
            _, api_key = await store.create_api_key("alice", frozenset({"jobs"}))
            async with served(_gateway(database_url, store, catalog, certifications)) as base:
                load = Load(base, api_key)
                task = asyncio.create_task(load.run())
                await asyncio.sleep(0.5)
                # Closing the pool while connections are checked out would leave those to
                # the garbage collector, so the clients pause for the switch.
                await load.quiet()
                reachable(False)
                await store.engine.dispose()  # pooled connections go: new ones cannot open
                load.running.set()
                await asyncio.sleep(0.7)
                await load.quiet()
                reachable(True)
                before = len(load.created)
                load.running.set()
                await asyncio.sleep(0.7)
                load.stop.set()
                await task
        finally:
            await store.close()
        _assert_only_unavailable(load.others)
        assert load.others, "no request met the unreachable file"
        assert len(load.created) > before > 0, "no job before the outage, or none after it"
        await _assert_all_stored(database_url, load.created)
