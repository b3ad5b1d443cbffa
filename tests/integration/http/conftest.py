"""Fixtures for the HTTP tests: an app on the test database, clients, API keys, served apps.

Helpers reach the tests as fixtures (the suite runs with ``--import-mode=importlib``, so
test modules cannot import each other).
"""

from __future__ import annotations

import sys
from pathlib import Path

# Helpers beside the tests (served.py); under --import-mode=importlib they need this path.
sys.path.insert(0, str(Path(__file__).parent))

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import httpx
import jsonschema
import pytest
import uvicorn
from litestar import Litestar

from contracts.loader import CATALOG_ROOT, load_contract
from gateway.app import create_app, settings_for_tests
from gateway.domain.ports import ContractSpec, JobStore
from gateway.http.edge import EdgeProtocol
from gateway.settings import DatabaseConfig, Settings, ShortcutsConfig
from gateway.store import SqlJobStore, open_store
from providers.config import ProviderConfig

ECHO = "echo@1"


@dataclasses.dataclass(frozen=True)
class SchemaContract:
    """A contract with just schemas: enough for the gateway's checks."""

    name: str
    input_schema: Mapping[str, Any]
    output_schema: Mapping[str, Any]
    description: str = "test contract"
    hedgeable: bool = False

    def validate_input(self, value: Any) -> list[str]:
        validator = jsonschema.Draft202012Validator(self.input_schema)
        return [e.message for e in validator.iter_errors(value)]

    def validate_output(self, value: Any) -> list[str]:
        validator = jsonschema.Draft202012Validator(self.output_schema)
        return [e.message for e in validator.iter_errors(value)]


@dataclasses.dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str


class FixedCertifications:
    """Allow exactly the (primary, fallback) pairs in ``pairs`` (tests may add to it)."""

    def __init__(self, *pairs: tuple[str, str]) -> None:
        self.pairs = set(pairs)

    def can_failover(
        self, contract: Any, primary: ProviderConfig, fallback: ProviderConfig
    ) -> Verdict:
        if (primary.name, fallback.name) in self.pairs:
            return Verdict(True, "certified")
        return Verdict(False, f"missing certificate for {fallback.name}")


@dataclasses.dataclass(frozen=True)
class Keys:
    """API keys of two owners and an admin, and the headers that use them."""

    alice: str
    bob: str
    admin: str

    def auth(self, who: str = "alice") -> dict[str, str]:
        return {"Authorization": f"Bearer {getattr(self, who)}"}

    def job(self, who: str = "alice", key: str = '"k-1"') -> dict[str, str]:
        return {**self.auth(who), "Idempotency-Key": key}


@contextlib.asynccontextmanager
async def _served(app: Litestar, protocol: type[EdgeProtocol] = EdgeProtocol) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn and the gateway's edge protocol on loopback; yield its URL."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_config=None,
        access_log=False,
        lifespan="on",
        http=protocol,
        timeout_keep_alive=Settings().keep_alive_s,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(10):
            while not server.started:
                if task.done():
                    task.result()
                    raise RuntimeError("uvicorn stopped while starting")
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@pytest.fixture(scope="session")
def catalog() -> dict[str, ContractSpec]:
    """The shipped ticket-triage contract plus ``echo@1`` (any object: numbers allowed)."""
    echo = SchemaContract(
        ECHO,
        input_schema={"type": "object"},
        output_schema={
            "type": "object",
            "required": ["echo"],
            "properties": {"echo": {}},
            "additionalProperties": False,
        },
    )
    triage = load_contract(CATALOG_ROOT / "ticket-triage")
    return {triage.name: triage, ECHO: echo}


@pytest.fixture
def settings(database_url: str) -> Settings:
    """Settings on the test database: simulator routes, dispatcher off."""
    return settings_for_tests(database_url=database_url)


@pytest.fixture
def certifications() -> FixedCertifications:
    """No fallback certified unless a test adds a pair."""
    return FixedCertifications()


@pytest.fixture
def app(
    settings: Settings,
    store: SqlJobStore,
    catalog: dict[str, ContractSpec],
    certifications: FixedCertifications,
) -> Litestar:
    """The gateway on the test store, with no background services."""
    return create_app(
        settings, store=store, catalog=catalog, certifications=certifications, background=[]
    )


@pytest.fixture
async def client(app: Litestar) -> AsyncIterator[httpx.AsyncClient]:
    """An in-process client (the lifespan runs)."""
    # The lifespan runs in this event loop (asyncpg connections belong to one loop) and
    # in one task of its own (Litestar's lifespan enters an anyio cancel scope).
    started, stop = asyncio.Event(), asyncio.Event()

    async def lifespan() -> None:
        async with app.lifespan():
            started.set()
            await stop.wait()

    task = asyncio.create_task(lifespan())
    await asyncio.wait_for(started.wait(), 10)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gw.test"
        ) as c:
            yield c
    finally:
        stop.set()
        await task


@pytest.fixture
async def keys(store: SqlJobStore) -> Keys:
    """Keys for two owners and an admin."""
    _, alice = await store.create_api_key("alice", frozenset({"jobs"}))
    _, bob = await store.create_api_key("bob", frozenset({"jobs"}))
    _, admin = await store.create_api_key("ops", frozenset({"jobs", "admin"}))
    return Keys(alice, bob, admin)


@pytest.fixture
def count_rows(store: JobStore) -> Callable[[], Awaitable[tuple[int, int]]]:
    """Return a function counting (jobs, attempts) of every test owner."""

    async def count() -> tuple[int, int]:
        jobs = 0
        for owner in ("alice", "bob", "ops"):
            page, _ = await store.list_jobs(owner, status=None, limit=100, cursor=None)
            jobs += len(page)
        return jobs, len(await store.list_attempts(None, limit=1000))

    return count


@pytest.fixture
def served() -> Callable[[Litestar], contextlib.AbstractAsyncContextManager[str]]:
    """Return a context manager serving an app on loopback (yields the base URL)."""
    return _served


@pytest.fixture
def second_gateway(
    database_url: str, catalog: dict[str, ContractSpec]
) -> Callable[[], contextlib.AbstractAsyncContextManager[str]]:
    """Return a context manager serving an independent gateway on the same database."""

    @contextlib.asynccontextmanager
    async def serve() -> AsyncIterator[str]:
        store = await open_store(
            database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
        )
        try:
            app = create_app(
                settings_for_tests(database_url=database_url),
                store=store,
                catalog=catalog,
                certifications=FixedCertifications(),
                background=[],
            )
            async with _served(app) as url:
                yield url
        finally:
            await store.close()

    return serve
