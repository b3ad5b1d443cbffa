"""Engines for SQLite (WAL, busy timeout, ``BEGIN IMMEDIATE``) and PostgreSQL, and migrations."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import PoolProxiedConnection

from gateway.database_url import DatabaseKind
from gateway.settings import DatabaseConfig
from gateway.store.failures import NotSent
from gateway.store.pg_connections import PostgresConnector, terminate
from gateway.store.sqlite_inline import inline_creator

SQLITE_BUSY_TIMEOUT = 30_000  # milliseconds a writer waits for another process's lock
#: Connections kept per process: the default 16 runners plus requests in flight. An
#: overflow connection is opened for one checkout and closed at checkin, so a pool smaller
#: than the usual concurrency opens and closes a connection (a backend fork, type
#: introspection) per request; py-spy showed asyncpg's connect on the hot path at 10.
PG_POOL_SIZE = 20
PG_MAX_OVERFLOW = 10  # extra connections under bursts (max_connections is 100 by default)
#: What one host's server processes may hold together (PostgreSQL allows 100 by default;
#: the rest is for the CLI, the reconciler, migrations and psql).
PG_HOST_CONNECTIONS = 80
PG_MIN_CONNECTIONS = 10  # one process's pool and overflow together, at least
IDLE_PING_AFTER = 5.0  # seconds a pooled connection may sit idle before it is pinged
#: Seconds the ping of an idle connection may take: a connection that cannot answer
#: ``;`` at once is replaced, rather than holding its request for a whole statement
#: deadline first.
PING_TIMEOUT = 1.0
_CHECKED_IN = "onejob_checked_in_at"
#: When a connection kept checked out between statements (``pg_bare``) went idle;
#: given back, that is its check-in time, so the checkout ping sees how long it sat.
IDLE_SINCE = "onejob_idle_since"

#: The connections of work that may go through any pooler and runs too seldom for
#: unnamed statements to cost anything: migrations and the check that they ran.
POOLER_SAFE = DatabaseConfig(pooler="transaction")

MIGRATIONS = Path(__file__).parent / "migrations"
T = TypeVar("T")
log = logging.getLogger(__name__)


def pg_pool_share(processes: int) -> tuple[int, int]:
    """Return one process's (pool_size, max_overflow) when ``processes`` share a host.

    Each process keeps the single process's 20 + 10 while the host's workers stay within
    ``PG_HOST_CONNECTIONS`` together (up to 2 workers); beyond that they split it, a
    third as overflow, at least ``PG_MIN_CONNECTIONS`` each. So the default ``--workers``
    (at most one per CPU) stays inside PostgreSQL's default ``max_connections`` of 100 up to 8
    CPUs. Two workers keep the whole 20 + 10 each: a worker may be given most of the
    host's connections at once (docs/decisions.md).
    """
    n = max(1, processes)
    per = min(PG_POOL_SIZE + PG_MAX_OVERFLOW, max(PG_MIN_CONNECTIONS, PG_HOST_CONNECTIONS // n))
    overflow = per // 3
    return per - overflow, overflow


def make_engine(
    url: str,
    *,
    processes: int = 1,
    database: DatabaseConfig | None = None,
    bounded: bool = True,
    sqlite_inline: bool = True,
    **kwargs: Any,
) -> AsyncEngine:
    """Create the process's engine; on SQLite every transaction takes the write lock at BEGIN.

    ``BEGIN IMMEDIATE`` makes concurrent writers queue on ``busy_timeout`` instead of
    failing with "database is locked" when a read transaction later tries to write.
    ``processes`` server processes share one host's PostgreSQL connections
    (``pg_pool_share``). On PostgreSQL every wait has ``database``'s deadline
    (``bound_waits``); ``bounded=False`` lifts the statement deadline only, for work
    that may rightly take long (migrations). ``sqlite_inline`` (a shortcut): SQLite on the
    event loop's thread (``sqlite_inline``), else on aiosqlite's thread per connection.
    """
    # Job inputs and results must not end up in logs through a failed statement's parameters.
    kwargs.setdefault("hide_parameters", True)
    if DatabaseKind.of(url) is DatabaseKind.POSTGRESQL:
        config = database or DatabaseConfig()
        pool_size, max_overflow = pg_pool_share(processes)
        kwargs.setdefault("pool_size", pool_size)
        kwargs.setdefault("max_overflow", max_overflow)
        kwargs.setdefault("pool_timeout", config.timeout)
        connector = PostgresConnector(url, config, statement_timeout=bounded)
        engine: AsyncEngine  # made below; the creator runs once it is
        if config.pooler == "transaction":
            kwargs.setdefault("creator", lambda: unnamed_statements(engine, connector))
        else:
            kwargs.setdefault("async_creator", connector.connect)
        engine = create_async_engine(url, **kwargs)
        bound_waits(engine)
        close_without_goodbye(engine)
        _ping_when_idle(engine, min(config.timeout, PING_TIMEOUT))
        return engine

    kwargs.setdefault("pool_size", 8)
    kwargs.setdefault("max_overflow", 8)
    kwargs.setdefault("pool_timeout", 60)
    parsed = make_url(url)
    (path, *_), cparams = parsed.get_dialect()().create_connect_args(parsed)
    # Every call runs on the event loop's thread (sqlite_inline says why); a pooled
    # connection may still be handed to another loop's thread (migrations, tests).
    cparams["check_same_thread"] = False
    if sqlite_inline:
        creator = inline_creator(path, SQLITE_BUSY_TIMEOUT / 1000, cparams)
        kwargs.setdefault("async_creator", creator)
    else:  # aiosqlite's thread waits in SQLite's own busy handler
        kwargs.setdefault("connect_args", {"timeout": SQLITE_BUSY_TIMEOUT / 1000})
    engine = create_async_engine(url, **kwargs)

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let us emit BEGIN ourselves (the driver's implicit BEGIN is DEFERRED).
        dbapi_connection.isolation_level = None
        try:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            mode = str(cursor.fetchone()[0]).lower()
            if mode != "wal":
                # Without WAL a COMMIT can meet SQLITE_BUSY, which sqlite_inline never
                # repeats: let SQLite's own handler wait (it holds the loop meanwhile).
                cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT}")
                log.warning(
                    "SQLite journal_mode is %s, not wal: waits for locks hold the event loop",
                    mode,
                )
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()
        except Exception:
            # SQLite opens the file lazily: an unreachable file fails here, and the pool
            # would drop this connection without closing it (its thread would leak).
            dbapi_connection.close()
            raise

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        if conn.get_execution_options().get("onejob_autocommit"):
            return  # one statement on its own: SQLite runs it in an implicit transaction
        mode = "DEFERRED" if conn.get_execution_options().get("onejob_readonly") else "IMMEDIATE"
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine


def unnamed_statements(engine: AsyncEngine, connector: PostgresConnector) -> Any:
    """Open a connection for SQLAlchemy that prepares no statement by name, caches none.

    Behind a transaction pooler (``[database] pooler = "transaction"``) each transaction,
    and each statement outside one, may run on another server connection: a statement
    prepared by name on one is missing on the next (``prepared statement
    "__asyncpg_stmt_1__" does not exist``) or another client's there (``... already
    exists``). asyncpg's cache is off (``PostgresConnector``), SQLAlchemy's too, and its
    statements are unnamed (an empty name), which asyncpg parses again with each
    execution. This is SQLAlchemy's own ``async_creator`` wrapper with its adapter's
    two options added (SQLAlchemy's asyncpg documentation, "Prepared Statement Name with
    PGBouncer"), which a bare ``async_creator`` cannot pass.
    """
    return engine.sync_engine.dialect.dbapi.connect(  # type: ignore[union-attr]
        async_creator_fn=connector.connect,
        prepared_statement_cache_size=0,
        prepared_statement_name_func=lambda: "",
    )


async def by_deadline(deadline: float, checkout: Awaitable[T]) -> T:
    """Await a checkout, or raise ``NotSent`` when the loop's time reaches ``deadline``
    first: a statement's deadline covers getting its connection, not only its answer.

    Opening a connection has a deadline of its own (``connect_timeout``), which does not
    know how much of the statement's is left: behind a silent network, a creation that
    needed a new connection half a second into its deadline answered 503 after deadline
    plus half a second; a record checked in after its connection was lost opens a new
    one too, so whether a checkout will wait cannot be told from the pool's counts. A
    cancelled checkout is undone by the pool (the record it was opening is invalidated
    and checked in), and nothing was sent. It costs ~3-7 µs a checkout (a timer), on a
    path the kept connections (``pg_bare.KeptConnections``) mostly spare.
    """
    scope = asyncio.timeout_at(deadline)
    try:
        async with scope:
            return await checkout
    except TimeoutError:
        if scope.expired():
            raise NotSent("no database connection within the statement's deadline") from None
        raise


async def pooled_connection(
    engine: AsyncEngine, deadline: float | None = None
) -> PoolProxiedConnection:
    """Check out a pooled connection bare, as ``engine.connect()`` would, errors included.

    ``engine.connect()`` wraps a driver error met while opening a connection (PostgreSQL
    starting up, too many clients; a SQLite file that cannot be opened) in SQLAlchemy's
    ``DBAPIError``, which ``failures.database_unavailable`` reads as 503; the pool itself
    raises the driver's error bare, so this wraps it the same way.

    ``deadline`` (the loop's time): ``NotSent`` if no connection came by then
    (``by_deadline``).
    """
    if deadline is not None:
        return await by_deadline(deadline, pooled_connection(engine))
    try:
        return await engine.raw_connection()
    except Exception as exc:
        dbapi_error: type[Exception] = engine.dialect.loaded_dbapi.Error
        if isinstance(exc, sqlite3.Error):
            dbapi_error = sqlite3.Error
        elif not isinstance(exc, dbapi_error):
            raise  # an OSError of the network, say: failures.py reads those as they are
        raise sa.exc.DBAPIError.instance(
            None, None, exc, dbapi_error, dialect=engine.dialect
        ) from exc


_BACKEND_PID = "onejob_backend_pid"


def track_backends(engine: AsyncEngine, pids: set[int]) -> None:
    """Keep ``pids`` equal to the PostgreSQL backend PIDs of ``engine``'s open connections.

    ``listen_postgres`` drops the notifications these backends send: they are this
    process's own, already published locally. A connection opened before this is called
    is not in the set; its echoes still arrive, which costs a re-read, never a wake-up.
    """

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, record: Any) -> None:
        pid = dbapi_connection.driver_connection.get_server_pid()
        record.info[_BACKEND_PID] = pid
        pids.add(pid)

    def _forget(_dbapi_connection: Any, record: Any, *_: Any) -> None:
        pids.discard(record.info.pop(_BACKEND_PID, None))

    event.listen(engine.sync_engine, "close", _forget)
    event.listen(engine.sync_engine, "invalidate", _forget)


def bound_waits(engine: AsyncEngine) -> None:
    """Discard, at once, a PostgreSQL connection whose statement failed without an answer.

    asyncpg raises ``TimeoutError`` when a statement outlives its ``command_timeout``
    and then sends a cancel request over a new connection, which a partition holds too;
    a connection that raised ``OSError`` lost its socket; a statement cancelled while
    out (a transaction's deadline, ``Postgres.bounded``) left its answer on the wire.
    None may go back to the pool: the connection is terminated here (no graceful goodbye
    that would wait on a silent or slow server) and SQLAlchemy invalidates it as a
    disconnect.
    """

    @event.listens_for(engine.sync_engine, "handle_error")
    def _on_error(context: Any) -> None:
        error = context.original_exception
        if not isinstance(error, OSError | asyncio.CancelledError):  # TimeoutError included
            return
        context.is_disconnect = True
        connection = context.connection
        fairy = getattr(connection, "connection", None) if connection is not None else None
        terminate(getattr(fairy, "driver_connection", None))


def close_without_goodbye(engine: AsyncEngine) -> None:
    """Drop a PostgreSQL connection the pool closes at once, without awaiting the server.

    The pool closes a connection given back beyond its size (an overflow one), one it
    invalidates, and all of them on ``dispose``. asyncpg's graceful close sends its
    goodbye and then waits for the server to hang up, up to the statement deadline: a
    round trip on a slow network (2 s of latency: 2 s), the whole deadline on a silent
    one, and a request whose statement had answered waited that long in its checkin
    before its own answer (a creation answered 2.1 s after it came, its deadline 1 s:
    ``tests/integration/http/test_database_silence.py``). Terminated first (the
    pool's ``close`` event comes before the driver's close), the socket is closed at
    once; the server ends an idle session at the end of its input as it would at the
    goodbye (an open transaction is rolled back either way).
    """

    @event.listens_for(engine.sync_engine, "close")
    def _on_close(dbapi_connection: Any, _record: Any) -> None:
        terminate(getattr(dbapi_connection, "driver_connection", None))


def _ping_when_idle(engine: AsyncEngine, timeout: float) -> None:
    """Ping a pooled connection at checkout only when it sat idle for ``IDLE_PING_AFTER``.

    A ping on every checkout (``pool_pre_ping``) is one more round trip per transaction.
    A connection in steady use is known to be alive; one that sat idle may have been cut
    by the server or a proxy, so it is tested (for ``timeout`` seconds at most), and
    replaced if dead. A connection cut while in use still fails its transaction, which
    the HTTP layer answers with 503.
    """

    @event.listens_for(engine.sync_engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info[_CHECKED_IN] = record.info.pop(IDLE_SINCE, None) or time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get(_CHECKED_IN)
        if since is None or time.monotonic() - since < IDLE_PING_AFTER:
            return
        driver = dbapi_connection.driver_connection
        try:
            # SQLAlchemy's way to await the driver inside a pool event (the adapted
            # connection's ``run_async``), on with every shortcut off too.
            dbapi_connection.run_async(lambda conn: conn.fetchrow(";", timeout=timeout))
        except BaseException as exc:
            # Dropped at once: the pool's invalidation would close it gracefully, up to
            # 2 s on a silent network, also when the checkout is cancelled mid-ping (a
            # statement's deadline: ``by_deadline``).
            terminate(driver)
            if not isinstance(exc, Exception):
                raise
            raise DisconnectionError("pooled connection is dead") from exc  # retried fresh


def _alembic_config(url: str) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def _upgrade_sync(url: str) -> None:
    from alembic import command

    command.upgrade(_alembic_config(url), "head")


async def upgrade_database(url: str) -> None:
    """Run Alembic migrations to head (in a thread: Alembic's env runs its own loop)."""
    await asyncio.to_thread(_upgrade_sync, url)


async def database_is_current(url: str) -> bool:
    """Say whether the database is migrated to head (the worker refuses to start otherwise)."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_alembic_config(url)).get_current_head()
    engine = make_engine(url, bounded=False, database=POOLER_SAFE)
    try:
        async with engine.connect() as conn:
            current = await conn.run_sync(
                lambda sync: MigrationContext.configure(sync).get_current_revision()
            )
    finally:
        await engine.dispose()
    return current == head
