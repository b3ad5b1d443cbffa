"""The one place the database's dialect is chosen: when the store is opened.

Everything that differs between PostgreSQL and SQLite once a database is open is carried
by what ``open_dialect`` returns: the database object (``database.Postgres`` or
``database.Sqlite``: how to lock, send a statement alone, publish a change, wake other
processes), and the two use cases written once per database, creation
(``create.PostgresCreation`` / ``SqliteCreation``) and the winning decision
(``finalize.PostgresDecisions`` / ``SqliteDecisions``). The store's use cases ask these
objects; none asks which database it is. Before a database is opened, what its URL decides
(one process or many, a LISTEN relay, standbys) is ``gateway.database_url.DatabaseKind``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.domain.ports import Clock, IdFactory
from gateway.domain.records import Principal
from gateway.notify import ChangeHub
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store.claim import UnsentClaims
from gateway.store.create import Creation, PostgresCreation, SqliteCreation
from gateway.store.creation_batches import CreationBatcher
from gateway.store.database import Database, Postgres, Sqlite
from gateway.store.finalize import Decisions, PostgresDecisions, SqliteDecisions


@dataclasses.dataclass(frozen=True, slots=True)
class Dialect:
    """What the store runs on: the database, and its halves of creation and R5."""

    db: Database
    creation: Creation
    decisions: Decisions


def open_dialect(
    engine: AsyncEngine,
    *,
    hub: ChangeHub,
    config: DatabaseConfig,
    shortcuts: ShortcutsConfig,
    clock: Clock,
    ids: IdFactory,
    unsent: UnsentClaims,
    authenticate: Callable[[str], Awaitable[Principal | None]],
    unavailable: Callable[[BaseException, str], bool],
) -> Dialect:
    """Choose the dialect of ``engine``'s database, once, and build what differs."""
    if engine.dialect.name == "sqlite":
        lite = Sqlite(engine, hub, config, shortcuts, clock, ids)
        return Dialect(lite, SqliteCreation(lite, authenticate), SqliteDecisions(lite))
    pg = Postgres(engine, hub, config, shortcuts, clock, ids)
    batches = CreationBatcher(pg, timeout=config.timeout) if shortcuts.creation_batches else None
    pg.wakeups.unavailable = unavailable  # an outage is counted, not logged per send
    return Dialect(pg, PostgresCreation(pg, unsent, batches), PostgresDecisions(pg))
