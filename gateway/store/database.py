"""The database a store talks to, chosen once when it is opened: ``Postgres`` or ``Sqlite``.

The use cases (``create``, ``claim``, ``finalize``, ...) say *what* to write; this object
says *how* this database runs it, so none of them asks which database it is on:

- a write transaction (``write``): on SQLite behind the process's one write lock, each
  writer queued on an asyncio lock (FIFO, no polling) instead of sleeping in the driver's
  busy handler; its changes published after the commit (``committed``);
- row locks (``for_update``, ``skip_locked``): PostgreSQL's; SQLite's write lock already
  serializes its writers;
- a statement sent on its own, outside a transaction (``alone``, PostgreSQL): through
  SQLAlchemy's connection, or, with the ``bare_connections`` shortcut, on the pooled asyncpg
  connection taken bare (``pg_bare.checkout``);
- the wake-ups of other processes (PostgreSQL's NOTIFY, after each commit: ``pg_wakeups``)
  and the readiness probe.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.domain.ports import Clock, IdFactory
from gateway.domain.records import JobRecord
from gateway.notify import ChangeHub
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import pg_bare, sqlite_bare
from gateway.store.engine import by_deadline, track_backends
from gateway.store.failures import NoAnswer
from gateway.store.pg_connections import PostgresConnector, ReadinessProbe, terminate
from gateway.store.pg_wakeups import Wakeups
from gateway.store.rows import Codec, naive_utc
from gateway.store.tables import QUEUE_INDEX, attempts, jobs
from gateway.store.transaction import WriteTx

#: What the listing's owner comparison and a row lock take (``Database.owner``).
Column = sa.ColumnElement[Any]
#: Seconds a statement is given at least, whatever its deadline has left (it is sent).
MIN_STATEMENT_TIME = 0.05


@dataclasses.dataclass(frozen=True, slots=True)
class Ran:
    """What one SQL text statement did: its rowcount and the rows it returned."""

    rowcount: int
    rows: list[Any]


#: Runs one SQL text statement with ``?`` parameters in ``Sqlite.statements``.
Run = Callable[[str, Sequence[Any]], Awaitable[Ran]]


def run_on(conn: AsyncConnection) -> Run:
    """Run SQL text statements through SQLAlchemy's ``conn`` (in its transaction)."""

    async def through_sqlalchemy(sql: str, params: Sequence[Any]) -> Ran:
        result = await conn.exec_driver_sql(sql, tuple(params))
        rows = list(result.fetchall()) if result.returns_rows else []
        return Ran(result.rowcount, rows)

    return through_sqlalchemy


class Database:
    """What both databases share: the engine, transactions, and publishing after commits."""

    #: ``postgresql`` or ``sqlite``.
    name = ""

    def __init__(
        self,
        engine: AsyncEngine,
        hub: ChangeHub,
        config: DatabaseConfig,
        shortcuts: ShortcutsConfig,
        clock: Clock,
        ids: IdFactory,
    ) -> None:
        self.engine = engine
        self.hub = hub
        self.config = config
        self.shortcuts = shortcuts
        self.clock = clock
        self.ids = ids

    def now(self) -> dt.datetime:
        """Return the store's clock as a stored time (naive UTC)."""
        return naive_utc(self.clock.now())

    def write_lock(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """Return what a writer of this process holds while it writes (SQLite: one lock)."""
        return contextlib.nullcontext()

    @contextlib.asynccontextmanager
    async def write(self) -> AsyncIterator[WriteTx]:
        """Run one write transaction; publish its changes after it commits."""
        async with self.write_lock(), self.bounded(self.engine.begin()) as conn:
            tx = WriteTx(conn, self)
            yield tx
        self.committed({job_id: tx.records.get(job_id) for job_id in tx.jobs}, tx.attempt_created)

    @contextlib.asynccontextmanager
    async def write_for_attempt(self, attempt_id: str) -> AsyncIterator[tuple[WriteTx, str] | None]:
        """Run a write transaction holding the attempt's job lock (None: no such attempt)."""
        async with self.write() as tx:
            found = (
                await tx.conn.execute(
                    sa.select(attempts.c.job_id, attempts.c.owner_id).where(
                        attempts.c.id == attempt_id
                    )
                )
            ).one_or_none()
            if found is None:
                yield None
                return
            job_id, tx.owners[found.job_id] = found.job_id, found.owner_id
            await tx.lock_job(job_id)  # by its owner too
            tx.jobs.add(job_id)
            yield tx, job_id

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """Run a read-only transaction (SQLite: ``BEGIN DEFERRED``, no write lock)."""
        async with self.bounded(self.engine.connect()) as conn:
            conn = await conn.execution_options(onejob_readonly=True)
            async with conn.begin():
                yield conn

    @contextlib.asynccontextmanager
    async def read_once(self) -> AsyncIterator[AsyncConnection]:
        """Run one single-statement read outside a transaction (no BEGIN, no COMMIT)."""
        async with self.bounded(self.engine.connect()) as conn:
            yield await conn.execution_options(**self._autocommit)

    #: The execution options of a statement outside a transaction.
    _autocommit: Mapping[str, Any] = {}

    def bounded(
        self, opening: contextlib.AbstractAsyncContextManager[AsyncConnection]
    ) -> contextlib.AbstractAsyncContextManager[AsyncConnection]:
        """Return ``opening`` (a connection, or one in a transaction) under this database's
        deadline for a whole transaction: none here (SQLite waits for its write lock)."""
        return opening

    def committed(self, jobs: Mapping[str, JobRecord | None], attempt_created: bool) -> None:
        """Publish a commit's changes to this process's waiters (with the job as
        committed, when known) and runners."""
        for job_id, record in jobs.items():
            self.hub.publish_job(job_id, record)
        if attempt_created:
            self.hub.publish_attempt()

    def for_update(self, query: sa.Select[Any]) -> sa.Select[Any]:
        """Lock the rows ``query`` reads until the transaction ends (where rows lock)."""
        return query

    def skip_locked(self, query: sa.Select[Any], of: Sequence[sa.Table]) -> sa.Select[Any]:
        """Lock the rows ``query`` reads, skipping rows another transaction holds."""
        return query

    def owner(self) -> Column:
        """The owner column as the listing indexes compare it."""
        return jobs.c.owner_id

    def claim_pick(self, pick: sa.Select[Any]) -> sa.Executable:
        """The claim's pick of the queue's head (``claim.next_in_line``), as this database
        runs it: locking what it reads, skipping what another transaction holds (where
        rows lock), by the queue's index."""
        return self.skip_locked(pick, of=[attempts, jobs])

    def insert(self, table: sa.Table) -> Any:
        """This database's INSERT of ``table``, with its ``ON CONFLICT`` clauses."""
        return sqlite.insert(table)

    async def ping(self, timeout: float) -> None:
        """Return once the database answered within ``timeout`` seconds; raise otherwise."""
        async with asyncio.timeout(timeout), self.engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))

    async def close(self) -> None:
        """Send what is pending, give back what is held, dispose of the engine."""
        await self.engine.dispose()


class Postgres(Database):
    """PostgreSQL: row locks, statements sent alone, NOTIFY for the other processes."""

    name = "postgresql"
    _autocommit = {"isolation_level": "AUTOCOMMIT"}

    def __init__(
        self,
        engine: AsyncEngine,
        hub: ChangeHub,
        config: DatabaseConfig,
        shortcuts: ShortcutsConfig,
        clock: Clock,
        ids: IdFactory,
    ) -> None:
        super().__init__(engine, hub, config, shortcuts, clock, ids)
        #: The NOTIFYs for other processes, sent after each commit.
        self.wakeups = Wakeups(engine, hub.own_backends)
        #: Connections kept out between statements sent alone (``bare_connections``).
        self.kept = pg_bare.KeptConnections(engine) if shortcuts.bare_connections else None
        self._probe = ReadinessProbe(
            PostgresConnector(engine.url.render_as_string(hide_password=False), config)
        )
        if config.pooler != "transaction":
            # Behind a transaction pooler a connection's backend PID is the pooler's
            # stand-in, not the backend that sends its NOTIFYs: echoes come back as
            # other processes' changes (a re-read each), and a stand-in equal to a real
            # backend's PID would drop another process's wake-up.
            track_backends(engine, hub.own_backends)

    def committed(self, jobs: Mapping[str, JobRecord | None], attempt_created: bool) -> None:
        """Publish here, then announce to the other processes (NOTIFY after the commit,
        not inside it: ``pg_wakeups`` says why)."""
        super().committed(jobs, attempt_created)
        if jobs or attempt_created:
            self.wakeups.post(jobs, attempt=attempt_created)

    def for_update(self, query: sa.Select[Any]) -> sa.Select[Any]:
        return query.with_for_update()

    @contextlib.asynccontextmanager
    async def bounded(
        self,
        opening: contextlib.AbstractAsyncContextManager[AsyncConnection],
        deadline: float | None = None,
    ) -> AsyncIterator[AsyncConnection]:
        """Yield ``opening``'s connection; all of it (the checkout, every statement, the
        commit) within the statement deadline, ``timeout`` seconds from now, or by
        ``deadline`` (the loop's time).

        Each statement also has ``timeout`` of its own (asyncpg's ``command_timeout``),
        which knows nothing of the round trips before it: with 2 s added between gateway
        and database, a read (checkout, BEGIN, two SELECTs, COMMIT) took 8 s, each part
        within 5 s. Past the deadline the task is cancelled where it waits: a checkout
        not done is ``NotSent`` (``engine.by_deadline``); a statement or a commit on the
        wire is cut with its connection (``engine.bound_waits``); a wait between
        statements terminates the connection before the rollback would wait on it. Both
        raise ``NoAnswer``: it may have committed.
        """
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + self.config.timeout
        driver: Any = None
        try:
            async with asyncio.timeout(None) as scope, contextlib.AsyncExitStack() as stack:
                conn = await by_deadline(deadline, stack.enter_async_context(opening))
                driver = conn.sync_connection.connection.driver_connection  # type: ignore[union-attr]
                scope.reschedule(deadline)
                try:
                    yield conn
                except BaseException:
                    if scope.expired():
                        terminate(driver)  # the rollback then finds it closed, at once
                    raise
        except TimeoutError as exc:
            if scope.expired():
                raise NoAnswer("the database did not answer within the deadline") from exc
            raise

    def skip_locked(self, query: sa.Select[Any], of: Sequence[sa.Table]) -> sa.Select[Any]:
        return query.with_for_update(skip_locked=True, of=list(of))

    def owner(self) -> Column:
        """Under ``COLLATE "C"``: the listing indexes' (migration 0004)."""
        return super().owner().collate("C")

    def insert(self, table: sa.Table) -> Any:
        return postgresql.insert(table)

    async def alone(
        self,
        sql: str,
        params: Sequence[Any],
        *,
        meanwhile: Callable[[], None] | None = None,
        timeout: float | None = None,
    ) -> list[Any]:
        """Send one statement outside a transaction; return its rows (mappings by column).

        ``meanwhile`` runs while it is on the wire; ``timeout`` (seconds) replaces the
        statement deadline, which covers getting a connection too (``NotSent`` when none
        came in time: ``engine.by_deadline``). On the pooled asyncpg connection taken
        bare with the ``bare_connections`` shortcut, else through SQLAlchemy's connection.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.config.timeout if timeout is None else timeout)
        if self.shortcuts.bare_connections:
            async with pg_bare.checkout(self.engine, sql, self.kept, deadline) as driver:
                left = max(deadline - loop.time(), MIN_STATEMENT_TIME)
                # asyncpg gives a statement it must prepare, and then a type it must
                # look up, ``left`` each: with 2 s of latency a creation given 3.6 s
                # took 4 s. The loop's timer cuts it at the deadline (``pg_bare``
                # terminates the connection).
                async with asyncio.timeout_at(loop.time() + left):
                    return list(await pg_bare.fetch(driver, sql, tuple(params), meanwhile, left))
        # The checkout and the statement together within ``timeout`` (``bounded``): the
        # connection's own ``command_timeout`` would give the statement all of it again
        # after a checkout that took most of it (6.1 s for a 5 s deadline, 2 s of latency).
        async with self.bounded(self.engine.connect(), deadline) as conn:
            if meanwhile is not None:
                loop.call_soon(meanwhile)
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            result = await conn.exec_driver_sql(sql, tuple(params))
            return [row._mapping for row in result] if result.returns_rows else []

    async def ping(self, timeout: float) -> None:
        """Ask on the probe's own connection (``ReadinessProbe``), not the pool's."""
        await self._probe.ping(timeout)

    async def close(self) -> None:
        """Send the last wake-ups, close the probe, give back the kept connections."""
        try:
            await self.wakeups.close()
        finally:
            await self._probe.close()
            if self.kept is not None:
                await self.kept.give_back()
            await super().close()


class Sqlite(Database):
    """SQLite: one write lock per file, queued on in this process; no row locks."""

    name = "sqlite"
    # Our BEGIN listener skips the transaction (the driver is in autocommit already);
    # setting isolation_level here would leave the pooled connection reset to the
    # driver's implicit-BEGIN mode.
    _autocommit = {"onejob_autocommit": True}

    def __init__(
        self,
        engine: AsyncEngine,
        hub: ChangeHub,
        config: DatabaseConfig,
        shortcuts: ShortcutsConfig,
        clock: Clock,
        ids: IdFactory,
    ) -> None:
        super().__init__(engine, hub, config, shortcuts, clock, ids)
        self._lock = asyncio.Lock()
        #: SQLAlchemy's own column processors, for the statements written as SQL text.
        self.codec = Codec(engine.dialect)

    def write_lock(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """The process's writers queue here (FIFO); other processes' in ``sqlite_inline``."""
        return self._lock

    def claim_pick(self, pick: sa.Select[Any]) -> sa.Executable:
        """By the queue's partial index, named (``INDEXED BY``): without statistics (SQLite
        gathers none unless told) its planner takes an index on ``state`` instead and sorts
        every unsent attempt at each claim. SQLAlchemy has no hint for SQLite, so the
        statement is compiled here with its values and the index named in its text."""
        sql = str(pick.compile(self.engine.sync_engine, compile_kwargs={"literal_binds": True}))
        head = "FROM attempts JOIN"
        assert head in sql, sql  # the shape ``claim.next_in_line`` builds
        named = sql.replace(head, f"FROM attempts INDEXED BY {QUEUE_INDEX} JOIN", 1)
        return sa.text(named).columns(*pick.selected_columns)  # read back as Core would

    @contextlib.asynccontextmanager
    async def statements(self) -> AsyncIterator[Run]:
        """Run a write transaction of SQL text statements (``?`` parameters, values through
        ``codec``): on the pooled driver connection with the ``bare_connections`` shortcut
        (``sqlite_bare``), else through SQLAlchemy's. The caller publishes what it made."""
        async with self._lock:
            if self.shortcuts.bare_connections:
                async with sqlite_bare.write_transaction(self.engine) as driver:

                    async def on_driver(sql: str, params: Sequence[Any]) -> Ran:
                        cursor = await driver.execute(sql, params)
                        return Ran(cursor.rowcount, list(await cursor.fetchall()))

                    yield on_driver
            else:
                async with self.engine.begin() as conn:
                    yield run_on(conn)
