"""PostgreSQL: the pooled asyncpg connection the one-statement paths run on
(``pg_bare.checkout``), without an SQLAlchemy ``Connection`` around it.

What it must keep from SQLAlchemy's own checkout: a lost connection is dropped from the
pool and reported as ``connection_invalidated``, a server error leaves the connection in
the pool, and connections beyond the pool's size are closed, not leaked.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import warnings
from collections.abc import AsyncIterator

import asyncpg
import pytest
import sqlalchemy as sa

from gateway.store import pg_bare as pg
from gateway.store.engine import make_engine

PID = "SELECT pg_backend_pid() AS pid"


@pytest.fixture
def pg_url(database_url: str) -> str:
    if database_url.startswith("sqlite"):
        pytest.skip("asyncpg is PostgreSQL's driver")
    return database_url


async def _pid(engine: sa.ext.asyncio.AsyncEngine) -> int:
    async with pg.checkout(engine, PID) as driver:
        return int(await driver.fetchval(PID))


async def _alive(engine: sa.ext.asyncio.AsyncEngine, pids: set[int]) -> int:
    """Count the backends among ``pids`` that are still connected."""
    async with engine.connect() as admin:
        query = sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(:p)")
        return int((await admin.execute(query, {"p": sorted(pids)})).scalar_one())


async def _terminate(pg_url: str, pid: int) -> None:
    """End a backend from another one, as a server restart or an admin would."""
    admin = make_engine(pg_url)
    try:
        async with admin.connect() as conn:
            await conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
    finally:
        await admin.dispose()


async def test_a_server_error_keeps_the_connection(pg_url: str) -> None:
    engine = make_engine(pg_url, pool_size=1, max_overflow=0)
    try:
        before = await _pid(engine)
        with pytest.raises(sa.exc.DBAPIError) as caught:
            async with pg.checkout(engine, "SELECT 1/0") as driver:
                await driver.fetch("SELECT 1/0")
        assert isinstance(caught.value.orig, asyncpg.DivisionByZeroError)
        assert not caught.value.connection_invalidated
        assert await _pid(engine) == before
    finally:
        await engine.dispose()


async def test_a_lost_connection_is_dropped_and_the_next_one_is_fresh(pg_url: str) -> None:
    engine = make_engine(pg_url, pool_size=1, max_overflow=0)
    try:
        doomed = await _pid(engine)
        await _terminate(pg_url, doomed)
        with pytest.raises(sa.exc.DBAPIError) as caught:
            async with pg.checkout(engine, PID) as driver:
                await driver.fetchval(PID)
        assert caught.value.connection_invalidated
        assert await _pid(engine) != doomed
        assert engine.pool.checkedout() == 0
    finally:
        await engine.dispose()


async def test_connections_beyond_the_pool_size_are_closed(pg_url: str) -> None:
    """Returned into a full pool, an overflow connection is closed (which awaits the
    driver): none is left open behind the pool's back."""
    engine = make_engine(pg_url, pool_size=2, max_overflow=10)
    release = asyncio.Event()
    holding = asyncio.Semaphore(0)

    async def hold() -> int:
        async with pg.checkout(engine, PID) as driver:
            pid = int(await driver.fetchval(PID))
            holding.release()
            await release.wait()
            return pid

    try:
        tasks = [asyncio.create_task(hold()) for _ in range(12)]
        for _ in tasks:
            await holding.acquire()
        assert engine.pool.checkedout() == 12
        release.set()
        pids = set(await asyncio.gather(*tasks))
        assert len(pids) == 12
        assert engine.pool.checkedin() == 2
        assert engine.pool.checkedout() == 0
        # The two kept in the pool, plus the admin's own (one of the two, reused).
        assert await _alive(engine, pids) == 2
    finally:
        await engine.dispose()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        gc.collect()
    assert not [w for w in seen if issubclass(w.category, ResourceWarning)]


async def test_a_connection_that_cannot_be_opened_is_sqlalchemys_error(pg_url: str) -> None:
    """The pool raises the driver's error bare; ``engine.connect()`` wrapped it, and
    ``failures.database_unavailable`` reads SQLAlchemy's (a server refusing at connect,
    e.g. 57P03 "starting up", is a 503)."""
    engine = make_engine(pg_url.rsplit("/", 1)[0] + "/onejob_no_such_database")
    try:
        with pytest.raises(sa.exc.DBAPIError) as caught:
            async with pg.checkout(engine, PID) as driver:
                await driver.fetchval(PID)
        assert getattr(caught.value.orig, "sqlstate", None) == "3D000"
    finally:
        await engine.dispose()


@pytest.mark.parametrize("lost", [False, True], ids=["returned", "invalidated"])
async def test_a_second_cancellation_during_the_hand_back_does_not_leak_the_connection(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, lost: bool
) -> None:
    """Cancelled once mid-statement, the caller hands the connection back in ``finally``
    (an overflow connection's close, or a lost one's invalidation, awaits the driver);
    cancelled again there, the hand-back still finishes and the pool gets its slot back."""
    engine = make_engine(pg_url, pool_size=1, max_overflow=1)
    slow = asyncio.Event()
    real_spawn = pg.greenlet_spawn

    async def slow_spawn(fn: object, *args: object) -> object:
        slow.set()
        await asyncio.sleep(0.3)  # the driver's close takes a while
        return await real_spawn(fn, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(pg, "greenlet_spawn", slow_spawn)

    async def statement(driver: asyncpg.Connection) -> None:
        if lost:
            await driver.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        await driver.fetchval("SELECT pg_sleep(10)")

    async def cancelled_twice() -> None:
        async with pg.checkout(engine, "SELECT pg_sleep(10)") as driver:
            await statement(driver)

    try:
        async with pg.checkout(engine, PID) as kept:  # the pool's one: the next overflows
            task = asyncio.create_task(cancelled_twice())
            await asyncio.sleep(0.3)
            assert await kept.fetchval("SELECT 1") == 1
        # The pool is full again: the overflow connection will be closed, not kept.
        if not lost:
            task.cancel()  # mid-statement
        await asyncio.wait_for(slow.wait(), 10)  # in the hand-back now
        task.cancel()  # and again
        with pytest.raises((asyncio.CancelledError, sa.exc.DBAPIError)):
            await task
        for _ in range(50):  # the hand-back finishes on its own
            # Its task leaves ``_HANDING_BACK`` in a done callback, which runs on the loop's
            # next turn after the pool has the connection back: wait for both.
            if engine.pool.checkedout() == 0 and not pg._HANDING_BACK:
                break
            await asyncio.sleep(0.05)
        assert engine.pool.checkedout() == 0
        assert not pg._HANDING_BACK
    finally:
        await engine.dispose()


# -- connections kept out between statements (``KeptConnections``) ---------------------------


@contextlib.asynccontextmanager
async def kept_engine(
    pg_url: str, *, most: int = pg.KEEP, **pool: int
) -> AsyncIterator[tuple[sa.ext.asyncio.AsyncEngine, pg.KeptConnections]]:
    """An engine with its pool sized by ``pool``, and connections kept out of it."""
    engine = make_engine(pg_url, **pool)
    kept = pg.KeptConnections(engine, most=most)
    try:
        yield engine, kept
    finally:
        await kept.give_back()
        await engine.dispose()


async def _kept_pid(engine: sa.ext.asyncio.AsyncEngine, kept: pg.KeptConnections) -> int:
    async with pg.checkout(engine, PID, kept) as driver:
        return int(await driver.fetchval(PID))


async def test_a_kept_connection_serves_the_next_statement_and_goes_back_on_give_back(
    pg_url: str,
) -> None:
    async with kept_engine(pg_url, pool_size=3, max_overflow=0, most=1) as (engine, kept):
        first = await _kept_pid(engine, kept)
        assert engine.pool.checkedout() == 1  # kept out, still the pool's
        assert await _kept_pid(engine, kept) == first
        assert await _kept_pid(engine, kept) == first
        await kept.give_back()
        assert engine.pool.checkedout() == 0
        assert engine.pool.checkedin() == 1
        assert await _pid(engine) == first  # back in the pool, alive


async def test_no_more_than_most_are_kept(pg_url: str) -> None:
    release = asyncio.Event()
    holding = asyncio.Semaphore(0)
    async with kept_engine(pg_url, pool_size=5, max_overflow=0, most=2) as (engine, kept):

        async def hold() -> None:
            async with pg.checkout(engine, PID, kept) as driver:
                await driver.fetchval(PID)
                holding.release()
                await release.wait()

        tasks = [asyncio.create_task(hold()) for _ in range(4)]
        for _ in tasks:
            await holding.acquire()
        release.set()
        await asyncio.gather(*tasks)
        assert engine.pool.checkedout() == 2
        assert engine.pool.checkedin() == 2


async def test_a_failed_statement_does_not_keep_its_connection(pg_url: str) -> None:
    async with kept_engine(pg_url, pool_size=2, max_overflow=0) as (engine, kept):
        with pytest.raises(sa.exc.DBAPIError):
            async with pg.checkout(engine, "SELECT 1/0", kept) as driver:
                await driver.fetch("SELECT 1/0")
        assert engine.pool.checkedout() == 0  # back in the pool, as before
        doomed = await _kept_pid(engine, kept)
        await _terminate(pg_url, doomed)
        with pytest.raises(sa.exc.DBAPIError) as caught:  # the kept one was lost
            async with pg.checkout(engine, PID, kept) as driver:
                await driver.fetchval(PID)
        assert caught.value.connection_invalidated
        assert engine.pool.checkedout() == 0
        assert await _kept_pid(engine, kept) != doomed


async def test_a_cancelled_statement_does_not_keep_its_connection(pg_url: str) -> None:
    started = asyncio.Event()
    async with kept_engine(pg_url, pool_size=2, max_overflow=0) as (engine, kept):

        async def slow() -> None:
            async with pg.checkout(engine, "SELECT pg_sleep(10)", kept) as driver:
                started.set()
                await driver.fetchval("SELECT pg_sleep(10)")

        task = asyncio.create_task(slow())
        await started.wait()
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not kept._idle
        assert engine.pool.checkedout() == 0


async def test_a_kept_connection_idle_too_long_is_pinged_by_the_pool_and_replaced_if_dead(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed while kept and idle: once it sat ``IDLE_PING_AFTER``, the next statement
    goes through the pool, whose checkout ping finds it dead and opens a fresh one; the
    statement succeeds, where without the ping it would have failed (a 503)."""
    from gateway.store import engine as engine_module

    monkeypatch.setattr(engine_module, "IDLE_PING_AFTER", 0.2)
    monkeypatch.setattr(pg, "IDLE_PING_AFTER", 0.2)
    async with kept_engine(pg_url, pool_size=1, max_overflow=0) as (engine, kept):
        doomed = await _kept_pid(engine, kept)
        await _terminate(pg_url, doomed)
        await asyncio.sleep(0.3)
        assert await _kept_pid(engine, kept) != doomed


async def test_a_full_pool_takes_its_connection_back_instead_of_keeping_it(pg_url: str) -> None:
    """Given back when the pool is full, a kept connection is closed (which awaits the
    driver), not left open behind the pool's back."""
    async with kept_engine(pg_url, pool_size=1, max_overflow=1) as (engine, kept):
        second = await _kept_pid(engine, kept)  # the pool's one: kept
        async with pg.checkout(engine, PID) as holder:  # an overflow one, given back
            assert await holder.fetchval("SELECT 1") == 1
        assert kept._idle
        assert engine.pool.checkedin() == 1  # the holder's; the pool is full now
        await kept.give_back()
        assert engine.pool.checkedout() == 0
        assert engine.pool.checkedin() == 1
        assert await _alive(engine, {second}) == 0


async def test_a_connection_beyond_the_pool_size_is_not_kept(pg_url: str) -> None:
    """Kept only while the pool is within its size: an overflow connection, or one others
    may be waiting for, goes back (here: the pool's one is held, so this one is extra)."""
    async with kept_engine(pg_url, pool_size=1, max_overflow=1) as (engine, kept):
        async with pg.checkout(engine, PID) as holder:  # the pool's one
            extra = await _kept_pid(engine, kept)
            assert not kept._idle
            assert engine.pool.checkedout() == 1
            assert await holder.fetchval("SELECT 1") == 1
        assert extra > 0


async def test_nothing_is_kept_after_give_back(pg_url: str) -> None:
    """The store gives them back before disposing of the engine; a statement finishing
    after that must not keep its connection out of the pool's reach."""
    engine = make_engine(pg_url, pool_size=2, max_overflow=0)
    kept = pg.KeptConnections(engine)
    try:
        await _kept_pid(engine, kept)
        await kept.give_back()
        await _kept_pid(engine, kept)
        assert not kept._idle
        assert engine.pool.checkedout() == 0
    finally:
        await engine.dispose()
