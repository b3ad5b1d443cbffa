"""PostgreSQL's pooled asyncpg connections taken bare: the ``bare_connections`` shortcut.

A statement sent on its own (``Database.alone``) goes on the driver connection SQLAlchemy's
pool hands out, without a ``Connection`` around it: building that, setting ``AUTOCOMMIT`` on
it and resetting it on return cost more CPU than the statement (~250 us against ~20 us
here, measured with ``SELECT 1``). The pool's checkout events (the idle ping included)
still run, and a few connections are kept out between statements (``KeptConnections``).
With the shortcut off, the same statements go through SQLAlchemy's connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import PoolProxiedConnection, QueuePool

# Not SQLAlchemy's API (sqlalchemy.util is internal): declared by the bare_connections
# shortcut (gateway/shortcuts.py), and run on its paths only.
from sqlalchemy.util.concurrency import greenlet_spawn

from gateway.store.engine import IDLE_PING_AFTER, IDLE_SINCE, pooled_connection
from gateway.store.pg_connections import terminate

#: Connections a store keeps checked out between its single statements, at most.
KEEP = 4


class KeptConnections:
    """A few pooled connections one store keeps checked out between its statements.

    Each statement the store sends alone (``checkout``) took a connection from the pool
    and gave it back: SQLAlchemy's greenlet, its checkout and check-in events and its
    reset, about 100 and 70 µs of CPU at one connection on this host (timed in the
    gateway), twice per sync job. And the pool hands out the connection idle longest,
    so at one connection each statement went to another of its backends, cold: a sync
    job cost PostgreSQL 0.79x the CPU on kept connections (docs/benchmarks.md,
    thirteenth session).

    So the last ``most`` connections given back after a statement that ended cleanly
    stay out, newest first. They are still the pool's, counted as checked out, so the
    pool's size bounds them with the rest, and one is kept only while the pool is
    within its size (never an overflow connection, never while others may be waiting
    for one). One that sat idle ``IDLE_PING_AFTER`` or longer, or whose socket the
    driver saw close, goes back to the pool with its idle time (``IDLE_SINCE``), and
    the pool's checkout pings it as it would any idle connection; each ``take`` sends
    the oldest stale ones back too. A statement that failed gives its connection back
    as before (a lost one invalidated), never to the kept ones, and so does a cancelled
    one. ``give_back`` returns them all and keeps none after: the store calls it before
    disposing of the engine.

    Not done: SQLAlchemy invalidates a whole pool when one of its ``Connection`` objects
    meets a lost server; the kept ones are not checked against that (it is private
    state), so after a restart up to ``most`` statements may meet their dead connection
    and answer 503, as any pooled connection used within ``IDLE_PING_AFTER`` would.
    """

    def __init__(self, engine: AsyncEngine, most: int = KEEP) -> None:
        self.engine = engine
        self.most = most
        self._idle: list[PoolProxiedConnection] = []
        self._closed = False

    async def take(self) -> PoolProxiedConnection | None:
        """Return the newest kept connection still fresh enough to use unpinged, if any."""
        while self._idle and not _fresh(self._idle[0]):
            await hand_back(self.engine, self._idle.pop(0))  # pinged at its next checkout
        while self._idle:
            fairy = self._idle.pop()
            if _fresh(fairy):
                del fairy.info[IDLE_SINCE]
                return fairy
            await hand_back(self.engine, fairy)
        return None

    def keep(self, fairy: PoolProxiedConnection) -> bool:
        """Keep a connection after a statement that ended cleanly, if there is room."""
        pool = self.engine.pool
        if (
            self._closed
            or len(self._idle) >= self.most
            or not isinstance(pool, QueuePool)
            or pool.checkedout() > pool.size()  # this one included
        ):
            return False
        fairy.info[IDLE_SINCE] = time.monotonic()
        self._idle.append(fairy)
        return True

    async def give_back(self) -> None:
        """Return every kept connection to the pool, and keep none from now on."""
        self._closed = True
        idle, self._idle = self._idle, []
        for fairy in idle:
            await hand_back(self.engine, fairy)


def _fresh(fairy: PoolProxiedConnection) -> bool:
    driver = fairy.driver_connection
    return (
        time.monotonic() - fairy.info[IDLE_SINCE] < IDLE_PING_AFTER
        and driver is not None
        and not driver.is_closed()
    )


async def fetch(
    driver: Any,
    sql: str,
    params: tuple[Any, ...],
    meanwhile: Callable[[], None] | None = None,
    timeout: float | None = None,
) -> Any:
    """Send ``sql`` and return its rows; run ``meanwhile`` while it is on the wire.

    Scheduled before the statement is sent, ``meanwhile`` runs at the loop's next turn:
    by then asyncpg has written the statement and waits for the answer (a statement not
    yet prepared waits for its Parse first, and ``meanwhile`` runs during that wait).
    ``timeout``: seconds for the answer (None: the connection's ``command_timeout``).
    """
    if meanwhile is not None:
        asyncio.get_running_loop().call_soon(meanwhile)
    return await driver.fetch(sql, *params, timeout=timeout)


@contextlib.asynccontextmanager
async def checkout(
    engine: AsyncEngine,
    sql: str,
    kept: KeptConnections | None = None,
    deadline: float | None = None,
) -> AsyncIterator[Any]:
    """Yield a pooled asyncpg connection for one statement outside a transaction; raise
    its errors as SQLAlchemy's do. With ``kept``, take a kept connection if there is one,
    and keep this one afterwards if the statement ended cleanly (``KeptConnections``).
    ``deadline`` (the loop's time): ``NotSent`` if no connection came by then.

    The connection comes from the engine's pool (its checkout events, the idle ping
    included, still run), without an SQLAlchemy ``Connection`` around it: building that,
    setting AUTOCOMMIT on it and resetting it on return cost more CPU than the statement
    (~250 µs against ~20 µs here, measured with ``SELECT 1``). Nothing here opens a
    transaction on the SQLAlchemy adapter, so giving the connection back is a plain
    return to the pool, with no rollback to await; only when the pool is full (an
    overflow connection, which the pool closes) does it go through SQLAlchemy's greenlet.

    A lost connection is a ``DBAPIError`` with ``connection_invalidated`` (the pool
    drops it), and every caller above handles one kind of database error.
    """
    fairy = await kept.take() if kept is not None else None
    if fairy is None:
        fairy = await pooled_connection(engine, deadline)
    driver = fairy.driver_connection
    clean = invalidating = False
    try:
        yield driver
        clean = True
    except Exception as exc:
        import asyncpg

        from_driver = type(exc).__module__.startswith("asyncpg")
        if not (from_driver or isinstance(exc, OSError | TimeoutError)):
            raise
        # A server error (a constraint, a bad statement) leaves the connection usable;
        # anything else (a cut socket, "cannot switch to state", a closed connection,
        # an admin shutdown) means it is not, and the pool must not hand it out again.
        server_error = isinstance(exc, asyncpg.PostgresError) and not isinstance(
            exc, asyncpg.PostgresConnectionError | asyncpg.AdminShutdownError
        )
        lost = not server_error or (driver is not None and driver.is_closed())
        if lost:
            # Closing the broken connection awaits the driver: SQLAlchemy's greenlet.
            # The invalidation checks the connection in itself: ``finally`` must not,
            # even when this caller is cancelled while it runs (a second check-in would
            # put the dying connection in the pool's queue for someone else).
            invalidating = True
            terminate(driver)  # no goodbye: the invalidation must not wait on the server
            await _to_the_end(fairy.invalidate, exc)
        raise sa.exc.DBAPIError(sql, None, exc, connection_invalidated=lost) from exc
    finally:
        if not (invalidating or (clean and kept is not None and kept.keep(fairy))):
            await hand_back(engine, fairy)


async def hand_back(engine: AsyncEngine, fairy: PoolProxiedConnection) -> None:
    """Return a connection to the pool, or close it when the pool is full."""
    pool = engine.pool
    if isinstance(pool, QueuePool) and pool.checkedin() < pool.size():
        fairy.close()
    else:  # the pool closes this one: the driver's close is awaited
        await _to_the_end(fairy.close)


#: Connection hand-backs still running after their caller was cancelled (kept referenced).
_HANDING_BACK: set[asyncio.Future[Any]] = set()


async def _to_the_end(fn: Any, *args: Any) -> None:
    """Run a pool hand-back (``close``, ``invalidate``) that awaits the driver to its end.

    A caller cancelled once reaches here through ``finally``; cancelled again while the
    driver is awaited, it would leave the connection checked out for good, and the pool
    one connection smaller. So the hand-back runs as a task of its own that a cancellation
    of the caller does not stop (as ``AsyncConnection.__aexit__`` does in SQLAlchemy).
    """
    task = asyncio.ensure_future(greenlet_spawn(fn, *args))
    _HANDING_BACK.add(task)
    task.add_done_callback(_HANDING_BACK.discard)
    await asyncio.shield(task)
