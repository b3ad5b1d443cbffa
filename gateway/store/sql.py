"""The JobStore on SQLAlchemy Core: one implementation for SQLite and PostgreSQL.

Its parts, one module each: ``rows`` (row mapping), ``statements`` (the reused hot
statements), ``base`` (transaction plumbing), ``creation`` (creation and reads),
``transitions``, ``decisions`` (the compare-and-swap), ``keys`` (API keys), ``retention``
(pruning old jobs), ``reconciling`` (the reconciler's findings)."""

from __future__ import annotations

import logging

import sqlalchemy as sa

from gateway.domain.clock import Clock, IdFactory
from gateway.notify import ChangeHub
from gateway.store.creation import CreationAndReads
from gateway.store.decisions import Decisions
from gateway.store.engine import make_engine
from gateway.store.keys import ApiKeys
from gateway.store.reconciling import ReconcilerFindings
from gateway.store.retention import Retention
from gateway.store.transitions import Transitions

log = logging.getLogger("onejob.store")


class SqlJobStore(CreationAndReads, Transitions, Decisions, ApiKeys, Retention, ReconcilerFindings):
    """Durable jobs and attempts on SQLite or PostgreSQL (the ``JobStore`` seam)."""

    async def ping(self) -> None:
        """Raise if the database cannot be reached."""
        async with self.engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))

    async def close(self) -> None:
        """Dispose of the engine."""
        await self.engine.dispose()


async def open_store(
    database_url: str,
    *,
    hub: ChangeHub | None = None,
    clock: Clock | None = None,
    ids: IdFactory | None = None,
) -> SqlJobStore:
    """Create the engine and the store (the caller runs migrations first)."""
    return SqlJobStore(make_engine(database_url), hub=hub, clock=clock, ids=ids)
