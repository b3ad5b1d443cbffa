"""SQLite on the event loop's own thread: aiosqlite's interface without its thread hop.

aiosqlite runs every call (a cursor, an execute, a fetch, a commit) on a thread of its own
per connection and wakes the event loop with ``call_soon_threadsafe``. A SQLite statement
on this store takes tens of microseconds; the hop to the thread and back, with the GIL
changing hands twice, costs more than the statement. Under the sync benchmark py-spy put
a sync job at 12-15 ms of CPU on SQLite against 5 ms on PostgreSQL, and running the same
calls inline halved it (docs/benchmarks.md).

So ``InlineConnection`` keeps aiosqlite's ``Connection`` and ``Cursor`` (the interface
SQLAlchemy's ``sqlite+aiosqlite`` dialect drives) and runs each call where it is awaited.
What could block the loop, and why it does not:

- **Another process's write lock.** SQLite's busy handler sleeps inside the C call, so
  the connection is opened with ``busy_timeout=0`` and a call that meets ``SQLITE_BUSY``
  before it took any lock is retried after an ``asyncio.sleep`` (1 ms doubling to 25 ms,
  as SQLite's own handler does) until ``busy_timeout`` seconds have passed; then the
  error is raised as before. A busy statement did nothing, so running it again is what
  the busy handler would have done (``_repeatable`` says which calls qualify). Writers of
  this process already queue on the store's asyncio lock, so only other processes
  (``--workers``, ``onejob worker``, the CLI) wait here. This relies on WAL, where a
  commit never meets ``SQLITE_BUSY``; a file that cannot be put in WAL mode keeps
  SQLite's own busy handler (``engine.make_engine``).
- **fsync.** The store runs WAL with ``synchronous=NORMAL``: a commit writes the WAL
  without an fsync; only a checkpoint (every ~1000 pages) syncs.
- **Long statements.** None on the request path; the retention command deletes in
  batches.

aiosqlite's internals (``_execute``, ``_connect``, ``__await__``, ``_tx``, ``_connection``,
``_connector``, ``_running``) are used, as ``gateway/shortcuts.py`` declares, so the
dependency is pinned to the 0.22 series; ``tests/integration/store/test_sqlite_inline.py``
exercises them.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Generator, Mapping
from functools import partial
from typing import Any

import aiosqlite

BUSY_FIRST_SLEEP = 0.001  # seconds: SQLite's own busy handler starts at 1 ms
BUSY_MAX_SLEEP = 0.025  # seconds, and grows to 25 ms
#: The result codes SQLite's busy handler waits on (plain BUSY, and BUSY_RECOVERY while
#: another connection recovers the WAL). ``SQLITE_BUSY_SNAPSHOT`` is not one: a read
#: transaction that cannot become a write one must start again, waiting does not help.
_WAITABLE = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_BUSY_RECOVERY})


class _RunNow:
    """Stand-in for aiosqlite's queue to its thread: run what is put, settle its future.

    SQLAlchemy's dialect sets ``isolation_level`` by putting a function on that queue.
    """

    def put_nowait(self, item: tuple[asyncio.Future[Any] | None, Callable[[], Any]]) -> None:
        future, function = item
        try:
            result = function()
        except BaseException as exc:  # handed to the awaiting side, as aiosqlite does
            if future is None:
                raise
            future.set_exception(exc)
        else:
            if future is not None:
                future.set_result(result)


def _repeatable(conn: sqlite3.Connection, fn: Callable[..., Any], args: tuple[Any, ...]) -> bool:
    """Say whether ``fn(*args)`` may run again after ``SQLITE_BUSY``: it did nothing then.

    Only one statement's start qualifies (``execute``): a fetch, a commit, a script or an
    ``executemany`` may have done part of its work. Outside a transaction a busy statement
    took no lock and changed nothing (``BEGIN IMMEDIATE`` included); inside one only a
    ``SELECT`` may run again (a deferred read transaction's first read can meet a WAL
    recovery), never a write.
    """
    if getattr(fn, "__name__", "") != "execute":
        return False
    if not conn.in_transaction:
        return True
    return bool(args) and isinstance(args[0], str) and args[0].lstrip()[:6].upper() == "SELECT"


class InlineConnection(aiosqlite.Connection):
    """An ``aiosqlite.Connection`` whose calls run on the calling thread, at once."""

    def __init__(self, connector: Callable[[], sqlite3.Connection], busy_timeout: float) -> None:
        super().__init__(connector, iter_chunk_size=64)
        self._tx = _RunNow()  # type: ignore[assignment]
        self._busy_timeout = busy_timeout
        #: The SQL of the last statement that failed here (None: none since it was reset),
        #: so an error raised out of a transaction names the statement that broke it.
        self.failed_statement: str | None = None

    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self._running or self._connection is None:
            raise ValueError("Connection closed")
        conn = self._connection
        deadline: float | None = None
        pause = BUSY_FIRST_SLEEP
        while True:
            repeatable = _repeatable(conn, fn, args)
            try:
                return fn(*args, **kwargs)
            except sqlite3.Error as exc:
                if (
                    repeatable
                    and isinstance(exc, sqlite3.OperationalError)
                    and exc.sqlite_errorcode in _WAITABLE
                ):
                    now = time.monotonic()
                    if deadline is None:
                        deadline = now + self._busy_timeout
                    if now < deadline:
                        await asyncio.sleep(min(pause, deadline - now))
                        pause = min(pause * 2, BUSY_MAX_SLEEP)
                        continue
                self.failed_statement = args[0] if args and isinstance(args[0], str) else None
                raise

    async def _connect(self) -> InlineConnection:
        if self._connection is None:
            self._connection = self._connector()
        return self

    def __await__(self) -> Generator[Any, None, InlineConnection]:
        return self._connect().__await__()  # no thread to start

    def stop(self) -> None:
        """Close at once (SQLAlchemy's forced terminate); there is no thread to stop."""
        self._running = False
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    async def close(self) -> None:
        self.stop()


def inline_creator(
    database: str, busy_timeout: float, connect_args: Mapping[str, Any] | None = None
) -> Callable[[], Any]:
    """Return an ``async_creator`` for ``create_async_engine`` opening ``database`` inline.

    ``connect_args`` are ``sqlite3.connect``'s (the dialect's ``create_connect_args``).
    The connection is opened with ``busy_timeout=0``: waiting is ``InlineConnection``'s.
    """
    kwargs = dict(connect_args or {})

    async def create() -> InlineConnection:
        connection = InlineConnection(partial(_open, database, kwargs), busy_timeout)
        return await connection

    return create


def _open(database: str, kwargs: dict[str, Any]) -> sqlite3.Connection:
    connection: sqlite3.Connection = sqlite3.connect(database, **kwargs)
    try:
        connection.execute("PRAGMA busy_timeout=0")
    except BaseException:
        connection.close()
        raise
    return connection
