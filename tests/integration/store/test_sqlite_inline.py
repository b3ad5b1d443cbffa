"""SQLite runs on the event loop's thread, and waiting for another process's lock never
blocks that loop (``gateway.store.sqlite_inline``)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from gateway.domain.records import CreateOutcome
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import open_store
from gateway.store.engine import make_engine
from gateway.store.sqlite_inline import InlineConnection, inline_creator


@pytest.fixture
def sqlite_url(tmp_path: Path, sqlite_template: Path) -> str:
    path = tmp_path / "onejob.db"
    path.write_bytes(sqlite_template.read_bytes())
    return f"sqlite+aiosqlite:///{path}"


@contextlib.contextmanager
def other_process_writing(url: str) -> Iterator[sqlite3.Connection]:
    """Hold the file's write lock the way another process's writer would."""
    db = sqlite3.connect(url.split(":///", 1)[1], isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    finally:
        if db.in_transaction:
            db.execute("ROLLBACK")
        db.close()


async def ticks_while(awaitable: Any) -> tuple[Any, int]:
    """Await ``awaitable`` and count how often the loop ran another task meanwhile."""
    ticks = 0
    done = asyncio.Event()

    async def tick() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    try:
        result = await awaitable
    finally:
        done.set()
        await ticker
    return result, ticks


async def test_a_write_waits_for_another_process_lock_without_blocking_the_loop(
    sqlite_url: str, make_job: Any
) -> None:
    store = await open_store(
        sqlite_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        with other_process_writing(sqlite_url) as other:
            loop = asyncio.get_running_loop()
            loop.call_later(0.4, other.execute, "COMMIT")  # the other writer finishes
            began = time.monotonic()
            created, ticks = await ticks_while(store.create_or_get(make_job()))
            waited = time.monotonic() - began
        assert created.outcome is CreateOutcome.CREATED
        assert waited >= 0.35  # it did wait for the lock ...
        assert ticks >= 10  # ... and the loop went on running other tasks meanwhile
        assert (await store.get_job(created.job.id, "alice")) is not None
    finally:
        await store.close()


async def test_a_lock_held_past_busy_timeout_fails_the_statement(sqlite_url: str) -> None:
    engine = make_engine(
        sqlite_url,
        async_creator=inline_creator(sqlite_url.split(":///", 1)[1], 0.3),
    )
    try:
        with other_process_writing(sqlite_url):
            began = time.monotonic()
            with pytest.raises(sa.exc.OperationalError, match="database is locked"):
                async with engine.begin() as conn:  # BEGIN IMMEDIATE
                    await conn.execute(sa.text("SELECT 1"))
            assert 0.25 <= time.monotonic() - began < 5
        async with engine.begin() as conn:  # the lock is free again: the pool still works
            assert (await conn.execute(sa.text("SELECT 1"))).scalar() == 1
    finally:
        await engine.dispose()


async def test_statements_run_on_the_loop_thread_and_open_no_thread(sqlite_url: str) -> None:
    threads_before = threading.active_count()
    engine = make_engine(sqlite_url)
    seen: list[int] = []

    def whose_thread() -> int:
        seen.append(threading.get_ident())
        return 0

    try:
        async with engine.connect() as conn:
            driver = (await conn.get_raw_connection()).driver_connection
            assert isinstance(driver, InlineConnection)
            await driver.create_function("whose_thread", 0, whose_thread)
            await conn.execute(sa.text("SELECT whose_thread()"))
            assert threading.active_count() == threads_before
    finally:
        await engine.dispose()
    assert seen == [threading.get_ident()]


def _busy(code: int) -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError("database is locked")
    exc.sqlite_errorcode = code
    return exc


async def test_only_the_start_of_one_statement_is_run_again_after_busy(
    sqlite_url: str,
) -> None:
    connection = await InlineConnection(
        lambda: sqlite3.connect(sqlite_url.split(":///", 1)[1], isolation_level=None, timeout=0),
        5.0,
    )
    runs: list[str] = []

    def busy_twice(name: str) -> Any:
        def call(*args: Any) -> str:
            runs.append(name)
            if runs.count(name) < 3:
                raise _busy(sqlite3.SQLITE_BUSY)
            return "done"

        call.__name__ = name
        return call

    try:
        # Outside a transaction a statement that met BUSY did nothing: waited on, rerun.
        assert (
            await connection._execute(busy_twice("execute"), "INSERT INTO t VALUES (1)") == "done"
        )
        assert runs.count("execute") == 3
        # A fetch, a script, a batch or a commit may have done part of its work: never.
        for name in ("fetchall", "executescript", "executemany", "commit"):
            with pytest.raises(sqlite3.OperationalError):
                await connection._execute(busy_twice(name), "SELECT 1")
            assert runs.count(name) == 1, name
        await connection.execute("BEGIN IMMEDIATE")
        runs.clear()
        with pytest.raises(sqlite3.OperationalError):  # a write inside a transaction: never
            await connection._execute(busy_twice("execute"), "UPDATE t SET x = 1")
        assert runs == ["execute"]
        runs.clear()  # a read inside one (a deferred transaction's first read): rerun
        assert await connection._execute(busy_twice("execute"), "  select 1") == "done"
        assert len(runs) == 3
        await connection.rollback()
    finally:
        await connection.close()


async def test_a_script_that_meets_another_process_lock_is_not_run_twice(
    sqlite_url: str,
) -> None:
    path = sqlite_url.split(":///", 1)[1]
    connection = await InlineConnection(
        lambda: sqlite3.connect(path, isolation_level=None, timeout=0), 5.0
    )
    try:
        await connection.execute("CREATE TABLE marks (n INTEGER)")
        with other_process_writing(sqlite_url):
            began = time.monotonic()
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                await connection.executescript(
                    "SELECT 1; INSERT INTO marks VALUES (1); INSERT INTO marks VALUES (2);"
                )
            assert time.monotonic() - began < 1  # raised, not waited on and run again
        cursor = await connection.execute("SELECT count(*) FROM marks")
        assert await cursor.fetchone() == (0,)
    finally:
        await connection.close()


async def test_a_call_that_is_not_busy_is_raised_at_once(sqlite_url: str) -> None:
    connection = await InlineConnection(
        lambda: sqlite3.connect(sqlite_url.split(":///", 1)[1], isolation_level=None, timeout=0),
        5.0,
    )
    try:
        began = time.monotonic()
        with pytest.raises(sqlite3.OperationalError, match="no such table"):
            await connection.execute("SELECT * FROM nowhere")
        assert time.monotonic() - began < 1
        await connection.close()
        with pytest.raises(ValueError, match="no active connection"):
            await connection.execute("SELECT 1")
    finally:
        await connection.close()


async def test_a_database_that_is_not_in_wal_mode_keeps_sqlite_own_busy_handler(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Without WAL a COMMIT can meet SQLITE_BUSY, which is never repeated: SQLite waits."""
    in_memory = inline_creator(":memory:", 5.0)  # journal_mode stays "memory"
    for kwargs, expected in (({}, 0), ({"async_creator": in_memory}, 30_000)):
        engine = make_engine(sqlite_url, **kwargs)
        try:
            async with engine.connect() as conn:
                timeout = (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar()
                assert timeout == expected, kwargs
        finally:
            await engine.dispose()
    assert "journal_mode is memory, not wal" in caplog.text


async def test_a_failed_statement_in_a_write_transaction_is_named(sqlite_url: str) -> None:
    """The error out of ``write_transaction`` names the statement that broke it (not
    "the transaction's statements"), and the transaction is rolled back."""
    from gateway.store.sqlite_bare import write_transaction

    engine = make_engine(sqlite_url)
    bad = "INSERT INTO api_keys (id) VALUES ('k1')"  # the other columns are NOT NULL
    try:
        with pytest.raises(sa.exc.IntegrityError) as raised:
            async with write_transaction(engine) as driver:
                await driver.execute("CREATE TABLE scratch (x INTEGER)")
                await driver.execute(bad)
        assert raised.value.statement == bad
        assert "NOT NULL" in str(raised.value.orig)
        async with engine.connect() as conn:  # rolled back: the first statement too
            names = await conn.execute(sa.text("SELECT name FROM sqlite_master"))
            assert "scratch" not in set(names.scalars())
    finally:
        await engine.dispose()
