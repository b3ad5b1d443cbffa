"""The ``JobStore`` seam on SQLAlchemy: one store for SQLite and PostgreSQL, one module per
thing it does.

| module | use case |
|---|---|
| ``create`` | R2: create a job, or replay / conflict on its key |
| ``read`` | a job with its attempts, an owner's list, attempts by state |
| ``audit`` | the audit trail (``events``: how each change writes its event) |
| ``attempts`` | R4: add an attempt; fail one (and fail over); mark one unknown |
| ``claim`` | R7: claim the next attempt; fresh deadlines; claims never sent |
| ``leases`` | renew a lease; reap expired ones |
| ``finalize`` | R5: the compare-and-swap |
| ``cancel``, ``resolve`` | the other decisions |
| ``reconcile``, ``prune``, ``keys`` | the reconciler's findings, retention, API keys |
| ``shadow`` | shadow checks: jobs to sample, each check's row, tallies (issue 38) |
| ``production`` | the newest jobs a primary answered, for ``certify --production`` (issue 48) |
| ``waits`` | an attempt waiting for capacity; jobs past their deadline; the queue's depth |
| ``capacity`` | what processes share of a provider's capacity (issue 43) |
| ``webhooks`` | subscriptions, their cursors over the audit trail, deliveries (issue 45) |

Which database it is (``database.Postgres`` or ``database.Sqlite``) is decided once, when
the store is opened (``dialects.open_dialect``): the use cases ask that object how to lock,
send and publish, and the two that send each database its own statements (creation, the
compare-and-swap) are given that database's half of their module.
"""

from __future__ import annotations

import logging

from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.domain.clock import SystemClock, UlidFactory
from gateway.domain.ports import Clock, IdFactory
from gateway.notify import ChangeHub
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store.attempts import Attempts
from gateway.store.audit import Audit
from gateway.store.cancel import Cancelling
from gateway.store.capacity import CapacitySharing
from gateway.store.claim import Claiming, UnsentClaims
from gateway.store.create import Creating, Creation
from gateway.store.database import Database
from gateway.store.dialects import open_dialect
from gateway.store.engine import make_engine
from gateway.store.failures import database_unavailable
from gateway.store.finalize import Decisions, Finalizing
from gateway.store.health import DatabaseHealth
from gateway.store.keys import ApiKeys
from gateway.store.leases import Leases
from gateway.store.production import ProductionSamples
from gateway.store.prune import Retention
from gateway.store.read import Reading
from gateway.store.reconcile import ReconcilerFindings
from gateway.store.resolve import Resolving
from gateway.store.shadow import ShadowChecks
from gateway.store.waits import Waits
from gateway.store.webhooks import WebhookRows

log = logging.getLogger("onejob.store")


class SqlJobStore(
    Creating,
    Reading,
    Audit,
    Attempts,
    Claiming,
    Leases,
    Finalizing,
    Cancelling,
    Resolving,
    ReconcilerFindings,
    Retention,
    ShadowChecks,
    ProductionSamples,
    Waits,
    CapacitySharing,
    WebhookRows,
    ApiKeys,
):
    """Durable jobs and attempts on SQLite or PostgreSQL (the ``JobStore`` seam)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        hub: ChangeHub | None = None,
        clock: Clock | None = None,
        ids: IdFactory | None = None,
        database: DatabaseConfig | None = None,
        shortcuts: ShortcutsConfig,
    ) -> None:
        self.engine = engine
        self.hub = hub or ChangeHub()
        self.clock = clock or SystemClock()
        self.ids = ids or UlidFactory(self.clock)
        #: Whether the database answers, as this process saw last (one log line a change).
        self.health = DatabaseHealth(self.ping)
        self.unsent = UnsentClaims()
        dialect = open_dialect(
            engine,
            hub=self.hub,
            config=database or DatabaseConfig(),
            shortcuts=shortcuts,
            clock=self.clock,
            ids=self.ids,
            unsent=self.unsent,
            authenticate=lambda secret: self.authenticate(secret),
            unavailable=self.unavailable,
        )
        self.db: Database = dialect.db
        self.creation: Creation = dialect.creation
        self.decisions: Decisions = dialect.decisions

    async def ping(self, timeout: float = 1.0) -> None:
        """Return once the database answered within ``timeout`` seconds; raise otherwise."""
        await self.db.ping(timeout)
        self.health.answered()

    def unavailable(self, exc: BaseException, where: str) -> bool:
        """Say whether ``exc`` means the database is unavailable (not a bug); count it if so.

        The caller answers 503 or tries again later, and logs nothing itself: the outage
        is logged once, with its counts (``DatabaseHealth``).
        """
        if not database_unavailable(exc):
            return False
        self.health.failed(where, exc)
        return True

    async def close(self) -> None:
        """Finish the creations on the wire, send the last wake-ups, give back what is held,
        dispose of the engine."""
        try:
            await self.health.close()
            await self.creation.close()
        finally:
            await self.db.close()


async def open_store(
    database_url: str,
    *,
    hub: ChangeHub | None = None,
    clock: Clock | None = None,
    ids: IdFactory | None = None,
    processes: int = 1,
    database: DatabaseConfig | None = None,
    shortcuts: ShortcutsConfig,
) -> SqlJobStore:
    """Create the engine and the store (the caller runs migrations first).

    ``processes``: how many server processes of one host share the database's
    connection budget (``onejob serve --workers``); each gets its share of the pool.
    ``database``: the deadlines of every wait on the database (``DatabaseConfig``).
    ``shortcuts``: which speed shortcuts run, chosen by the caller (the composition root
    passes the settings'; the store never reads ``ONEJOB_SHORTCUTS`` itself).
    """
    engine = make_engine(
        database_url,
        processes=processes,
        database=database,
        sqlite_inline=shortcuts.sqlite_inline,
    )
    return SqlJobStore(
        engine, hub=hub, clock=clock, ids=ids, database=database, shortcuts=shortcuts
    )
