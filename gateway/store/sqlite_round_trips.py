"""SQLite: creation and replay as plain statements on the pooled connection.

On PostgreSQL the creating transaction is one statement sent straight through asyncpg
(``pg_round_trips``). SQLite has no data-modifying CTEs, so creation stays a transaction
of a few statements (``BEGIN IMMEDIATE``, the job, its first attempt, its events,
``COMMIT``), and each of them through SQLAlchemy Core cost more CPU than SQLite itself:
a checkout wrapped in a ``Connection``, a greenlet per statement, parameter processing,
an execution context, result processing. Measured here with the store's own calls:
~2.3 ms of CPU per creation through Core against ~0.6 ms for the same statements sent on
the pooled connection.

So this module runs the same statements on the driver connection SQLAlchemy's pool hands
out (``sqlite_inline.InlineConnection``, aiosqlite's interface run on the loop's thread,
which also waits for other processes' write locks), with the values converted by the very
bind and result processors SQLAlchemy would use for each column: what is written here is
byte for byte what Core would write, and what is read is what Core would read.

The transaction is the one ``StoreBase._tx`` opens on SQLite: under the store's asyncio
write lock, ``BEGIN IMMEDIATE``, and the UNIQUE constraint decides with ``ON CONFLICT DO
NOTHING``. A key already taken is read, and its ``replayed`` or ``conflict`` event written,
in the same transaction.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import types
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util.concurrency import greenlet_spawn

from gateway.store.engine import pooled_connection
from gateway.store.tables import attempts, job_events, jobs

JOB_COLUMNS = [c.name for c in jobs.c]
ATTEMPT_COLUMNS = [c.name for c in attempts.c]
_EVENT_COLUMNS = ("job_id", "attempt_id", "kind", "detail", "at")


def _placeholders(n: int) -> str:
    return ", ".join("?" * n)


INSERT_JOB = (
    f"INSERT INTO jobs ({', '.join(JOB_COLUMNS)}) VALUES ({_placeholders(len(JOB_COLUMNS))})"
    " ON CONFLICT (owner_id, idempotency_key) DO NOTHING"
)
INSERT_ATTEMPT = (
    f"INSERT INTO attempts ({', '.join(ATTEMPT_COLUMNS)})"
    f" VALUES ({_placeholders(len(ATTEMPT_COLUMNS))})"
)
#: The job an owner's key made and its attempts, oldest first: a row per attempt, the
#: job's columns repeated (``Codec.job_with_attempts`` reads it).
SELECT_JOB_BY_KEY = (
    f"SELECT {', '.join('j.' + c for c in JOB_COLUMNS)},"
    f" {', '.join('a.' + c for c in ATTEMPT_COLUMNS)}"
    " FROM jobs AS j LEFT JOIN attempts AS a ON a.job_id = j.id"
    " WHERE j.owner_id = ? AND j.idempotency_key = ? ORDER BY a.number"
)
SELECT_ATTEMPTS = (
    f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM attempts WHERE job_id = ? ORDER BY number"
)


#: R5 for a running attempt: the compare-and-swap, as ``statements.CAS_RUNNING`` says it.
CAS_RUNNING = (
    "UPDATE jobs SET status = 'succeeded', result = ?, error = NULL, completed_by = ?,"
    " version = version + 1, updated_at = ?"
    " WHERE id = (SELECT job_id FROM attempts WHERE id = ? AND state = 'running')"
    " AND version = (SELECT read_version FROM attempts WHERE id = ? AND state = 'running')"
    " AND completed_by IS NULL"
    f" RETURNING {', '.join(JOB_COLUMNS)}"
)
#: The winner's move to ``succeeded``, as ``statements.FINISH_RUNNING``.
FINISH_RUNNING = (
    "UPDATE attempts SET state = 'succeeded', finished_at = ?, provider_request_id = ?,"
    " reported_model = ? WHERE id = ? AND state = 'running' RETURNING provider"
)


@functools.lru_cache(maxsize=8)
def insert_events_sql(rows: int) -> str:
    """One multi-row INSERT of ``rows`` audit events."""
    one = f"({_placeholders(len(_EVENT_COLUMNS))})"
    return f"INSERT INTO job_events ({', '.join(_EVENT_COLUMNS)}) VALUES {', '.join([one] * rows)}"


Processor = Callable[[Any], Any] | None


class Codec:
    """SQLAlchemy's own bind and result processors for the tables' columns on SQLite."""

    def __init__(self, dialect: sa.Dialect) -> None:
        def binds(table: sa.Table) -> dict[str, Processor]:
            return {c.name: c.type.dialect_impl(dialect).bind_processor(dialect) for c in table.c}

        def results(table: sa.Table) -> list[Processor]:
            return [c.type.dialect_impl(dialect).result_processor(dialect, None) for c in table.c]

        self._bind = {"jobs": binds(jobs), "attempts": binds(attempts), "events": binds(job_events)}
        self._job_results = results(jobs)
        self._attempt_results = results(attempts)

    def bind(self, table: str, column: str, value: Any) -> Any:
        """One value as SQLAlchemy would send it for ``table.column`` (``None`` too: a
        JSON column stores it as JSON ``null``, as Core does)."""
        proc = self._bind[table][column]
        return value if proc is None else proc(value)

    def params(self, table: str, values: dict[str, Any], columns: Sequence[str]) -> list[Any]:
        """The positional parameters of ``columns`` from ``values``: an absent column is
        SQL NULL (Core leaves it out of the INSERT), a present one goes through ``bind``."""
        return [self.bind(table, c, values[c]) if c in values else None for c in columns]

    def event_params(self, rows: Sequence[tuple[str, str | None, str, Any, Any]]) -> list[Any]:
        """Parameters of ``insert_events_sql(len(rows))``: ``(job_id, attempt_id, kind,
        detail, at)`` each."""
        out: list[Any] = []
        for row in rows:
            out.extend(
                self.params("events", dict(zip(_EVENT_COLUMNS, row, strict=True)), _EVENT_COLUMNS)
            )
        return out

    def job_row(self, raw: Sequence[Any]) -> types.SimpleNamespace:
        return _row(raw, JOB_COLUMNS, self._job_results)

    def attempt_row(self, raw: Sequence[Any]) -> types.SimpleNamespace:
        return _row(raw, ATTEMPT_COLUMNS, self._attempt_results)

    def job_with_attempts(
        self, raws: Sequence[Sequence[Any]]
    ) -> tuple[types.SimpleNamespace, list[types.SimpleNamespace]]:
        """Read ``SELECT_JOB_BY_KEY``'s rows (at least one): the job and its attempts."""
        n = len(JOB_COLUMNS)
        tried = [self.attempt_row(raw[n:]) for raw in raws if raw[n] is not None]
        return self.job_row(raws[0][:n]), tried


def _row(
    raw: Sequence[Any], names: Sequence[str], procs: Sequence[Processor]
) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        **{
            name: value if proc is None or value is None else proc(value)
            for name, value, proc in zip(names, raw, procs, strict=True)
        }
    )


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
