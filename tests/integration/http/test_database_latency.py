"""A gateway whose PostgreSQL answers late under load: answered in time, fast again after.

Clients create jobs with fresh keys over a real socket while every byte PostgreSQL sends
reaches the gateway ``latency`` seconds late (``scenarios.forwarder``'s delaying
forward, on a thread of its own: each round trip grows by it), then on time again.
Every request is answered within the database deadline plus a second, only with 201 or
503 ``urn:onejob:unavailable`` (never a 500, never a hang): with the latency below the
deadline some statements finish and some do not, and a request that needed several
round trips (a new connection, a statement not yet prepared, a checkout behind the
others) must still answer by its deadline; with the latency above it nothing can finish
in time. Once the latency is gone, every request answers 201 again; every acknowledged
job is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import httpx
import pytest
from litestar import Litestar
from sqlalchemy.engine import make_url

from gateway.app import create_app, settings_for_tests
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import open_store
from scenarios.forwarder import Forward, Forwarder

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.parametrize(
        "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
    ),
]

#: 2 s for the database's work, 3 s to connect. Twice the silence tests' deadline: with
#: 1 s, two waits of a second each (a checkout, then a statement with a deadline of its
#: own) still fit within the deadline plus a second. With 0.9 s of latency, before each
#: wait had one deadline, a creation that opened a connection and then sent its
#: statement took 3.4 s on the plain path.
DEADLINE = DatabaseConfig(timeout=2.0, connect_timeout=3.0)
#: Clients before the latency; twice as many more join when it starts, so connections
#: are opened, and statements prepared on them, while every round trip is late.
CLIENTS = 4
SLOW_FOR = 3.0  # seconds the database answers late
BODY = b'{"contract": "echo@1", "input": {"n": 1}}'
_keys = itertools.count()


class Clients:
    """``CLIENTS`` clients creating jobs with fresh keys, every answer timed; twice as many
    more once ``more`` is set."""

    def __init__(self, base_url: str, api_key: str) -> None:
        self.base_url, self.api_key = base_url, api_key
        #: (sent at, answered at, status, job id or problem type)
        self.answers: list[tuple[float, float, int, str]] = []
        self.stop = asyncio.Event()

    async def run(self, more: asyncio.Event | None = None) -> None:
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(base_url=self.base_url, timeout=30, limits=limits) as http:
            first = [asyncio.create_task(self._client(http)) for _ in range(CLIENTS)]
            if more is not None:
                await more.wait()
                first += [asyncio.create_task(self._client(http)) for _ in range(2 * CLIENTS)]
            await asyncio.gather(*first)

    async def _client(self, http: httpx.AsyncClient) -> None:
        while not self.stop.is_set():
            headers = {
                "Authorization": f"Bearer {self.api_key}",
                "Idempotency-Key": f'"latency-{next(_keys)}"',
            }
            sent = time.monotonic()
            r = await http.post("/v1/jobs", content=BODY, headers=headers)
            body = r.json()
            what = body.get("id") if r.status_code == 201 else body.get("type", "")
            self.answers.append((sent, time.monotonic(), r.status_code, str(what)))
            if r.status_code == 503:
                assert r.headers["retry-after"] == "1"
                await asyncio.sleep(0.05)


@pytest.fixture
async def forward(database_url: str) -> AsyncIterator[Forward]:
    """A forward to the test database that can hold back what PostgreSQL sends."""
    url = make_url(database_url)
    forwarder = Forwarder("database-latency")
    try:
        yield await forwarder.add(
            "database", "127.0.0.1", 0, (url.host or "127.0.0.1", url.port or 5432)
        )
    finally:
        await forwarder.close()


@contextlib.asynccontextmanager
async def gateway_through(
    url: str,
    catalog: Any,
    certifications: Any,
    served: Callable[[Litestar], contextlib.AbstractAsyncContextManager[str]],
) -> AsyncIterator[tuple[str, str]]:
    store = await open_store(url, database=DEADLINE, shortcuts=ShortcutsConfig.from_env())
    try:
        _, api_key = await store.create_api_key("alice", frozenset({"jobs"}))
        app = create_app(
            settings_for_tests(database_url=url, database=DEADLINE.model_dump()),
            store=store,
            catalog=catalog,
            certifications=certifications,
            background=[],
        )
        async with served(app) as base:
            yield base, api_key
    finally:
        await store.close()


@pytest.mark.parametrize("latency", [0.9, 3.0], ids=["below-deadline", "above-deadline"])
async def test_a_late_database_under_load_answers_within_the_deadline_and_loses_nothing(
    latency: float,
    forward: Forward,
    database_url: str,
    catalog: Any,
    certifications: Any,
    served: Callable[[Litestar], contextlib.AbstractAsyncContextManager[str]],
) -> None:
    through = make_url(database_url).set(host="127.0.0.1", port=forward.port)
    url = through.render_as_string(hide_password=False)
    async with gateway_through(url, catalog, certifications, served) as (base, key):
        clients = Clients(base, key)
        more = asyncio.Event()
        load = asyncio.create_task(clients.run(more))
        await asyncio.sleep(0.5)
        forward.delay = latency
        more.set()
        slowed = time.monotonic()
        await asyncio.sleep(SLOW_FOR)
        forward.delay = 0.0
        # What was sent before this still crosses the forward late: a request sent a
        # deadline and a second after it meets only prompt answers.
        healed = time.monotonic() + latency
        await asyncio.sleep(latency + DEADLINE.timeout + 1.0 + 0.5)
        clients.stop.set()
        await load

    # Every request answered within the database's deadline plus a second, 201 or 503.
    took = sorted(answered - sent for sent, answered, _, _ in clients.answers)
    statuses = [status for *_, status, _ in clients.answers]
    print(
        f"{latency} s of latency: {len(took)} answers, {statuses.count(201)} 201,"
        f" {statuses.count(503)} 503, slowest {took[-1]:.2f} s"
    )
    assert took[-1] < DEADLINE.timeout + 1.0, f"slowest answers {took[-5:]}"
    assert {status for *_, status, _ in clients.answers} <= {201, 503}
    problems = {what for *_, status, what in clients.answers if status == 503}
    assert problems <= {"urn:onejob:unavailable"}
    during = [a for a in clients.answers if slowed <= a[0] < healed]
    assert any(answered - sent >= latency for sent, answered, *_ in during) or any(
        status == 503 for *_, status, _ in during
    ), "nobody met the latency"

    # Fast again: every request sent once the late answers were through got its 201.
    after = [a for a in clients.answers if a[0] >= healed + DEADLINE.timeout + 1.0]
    assert after and {status for *_, status, _ in after} == {201}

    # Nothing acknowledged is lost.
    created = {what for *_, status, what in clients.answers if status == 201}
    direct = make_url(database_url).set(drivername="postgresql")
    conn = await asyncpg.connect(direct.render_as_string(hide_password=False))
    try:
        stored = await conn.fetch("SELECT id FROM jobs WHERE id = ANY($1::varchar[])", [*created])
    finally:
        await conn.close()
    assert created and {row["id"] for row in stored} == created
