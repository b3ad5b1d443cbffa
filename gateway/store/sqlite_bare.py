"""SQLite statements sent on the pooled driver connection: the ``bare_connections`` shortcut.

SQLite has no data-modifying CTEs, so its creation and its winning decision stay
transactions of a few statements (``BEGIN IMMEDIATE``, the rows, ``COMMIT``), written as
SQL text (``create``, ``finalize``). Through SQLAlchemy's connection each statement cost
more CPU than SQLite itself (a checkout wrapped in a ``Connection``, a greenlet per
statement, an execution context, result processing): ~2.3 ms of CPU per creation against
~0.6 ms on the driver connection. So, with the shortcut, the same text runs on the driver
connection SQLAlchemy's pool hands out; values go through SQLAlchemy's own column
processors either way (``rows.Codec``), so what is written is byte for byte the same.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

# Not SQLAlchemy's API (sqlalchemy.util is internal): declared by the bare_connections
# shortcut (gateway/shortcuts.py), and run on its paths only.
from sqlalchemy.util.concurrency import greenlet_spawn

from gateway.store.engine import pooled_connection


@contextlib.asynccontextmanager
async def write_transaction(engine: AsyncEngine) -> AsyncIterator[Any]:
    """Yield the pooled driver connection inside ``BEGIN IMMEDIATE``; commit on leaving,
    roll back on an error. The caller holds the store's write lock.

    Errors come out as SQLAlchemy's (``DBAPIError.instance``: ``OperationalError`` for a
    lock waited out, say), as every caller above expects; a connection SQLAlchemy's
    dialect calls lost is dropped from the pool.
    """
    fairy = await pooled_connection(engine)
    driver: Any = fairy.driver_connection
    statement = "BEGIN IMMEDIATE"
    try:
        await driver.execute(statement)
        statement = "(the transaction's statements)"  # unless one of them is named
        driver.failed_statement = None
        try:
            yield driver
            statement, driver.failed_statement = "COMMIT", None
            await driver.commit()
        except BaseException:
            statement = driver.failed_statement or statement  # the one that broke it
            with contextlib.suppress(sqlite3.Error):
                await driver.rollback()
            raise
    except sqlite3.Error as exc:
        lost = engine.dialect.is_disconnect(exc, fairy.dbapi_connection, None)  # type: ignore[arg-type]
        if lost:
            await greenlet_spawn(fairy.invalidate, exc)
        raise sa.exc.DBAPIError.instance(
            statement, None, exc, sqlite3.Error, connection_invalidated=lost
        ) from exc
    except ValueError as exc:  # aiosqlite's "Connection closed": not usable again
        await greenlet_spawn(fairy.invalidate, exc)
        raise sa.exc.DBAPIError(statement, None, exc, connection_invalidated=True) from exc
    finally:
        # The return's reset (a rollback, a no-op here) goes through the adapter, which
        # awaits: SQLAlchemy's greenlet.
        await greenlet_spawn(fairy.close)
