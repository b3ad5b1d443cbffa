"""The JobStore on SQLAlchemy Core: one implementation for SQLite and PostgreSQL.

Its parts, one module each: ``rows`` (row mapping), ``statements`` (the reused hot
statements), ``base`` (transaction plumbing), ``creation`` (creation and reads),
``transitions``, ``decisions`` (the compare-and-swap), ``keys`` (API keys), ``retention``
(pruning old jobs), ``reconciling`` (the reconciler's findings)."""

from __future__ import annotations

import dataclasses
import logging

from gateway.domain.clock import Clock, IdFactory
from gateway.domain.records import ClaimSpec, CreateResult, NewJob
from gateway.notify import ChangeHub
from gateway.settings import DatabaseConfig
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

    async def create_or_get_for_key(
        self, secret: str, new: NewJob, claim: ClaimSpec | None = None
    ) -> CreateResult | None:
        """``create_or_get`` for the owner of the API key ``secret`` (``KeyedCreation``).

        PostgreSQL checks the key in the creating statement; SQLite, with no round trip
        to save, reads it first. None: the key is unknown or revoked, or (PostgreSQL) the
        key's job is not visible yet; the caller reads the key and creates without it.
        """
        if not self._sqlite:
            return await self._create_for_key(secret, new, claim)
        principal = await self.authenticate(secret)
        if principal is None:
            return None
        return await self.create_or_get(
            dataclasses.replace(new, owner_id=principal.owner_id), claim
        )

    async def close(self) -> None:
        """Finish the creations on the wire, send the last wake-ups, give back the kept
        connections, dispose of the engine."""
        try:
            await self.health.close()
            if self._creations is not None:
                await self._creations.close()
            if self._wakeups is not None:
                await self._wakeups.close()
        finally:
            if self._probe is not None:
                await self._probe.close()
            if self._kept is not None:
                await self._kept.give_back()
            await self.engine.dispose()


async def open_store(
    database_url: str,
    *,
    hub: ChangeHub | None = None,
    clock: Clock | None = None,
    ids: IdFactory | None = None,
    processes: int = 1,
    database: DatabaseConfig | None = None,
) -> SqlJobStore:
    """Create the engine and the store (the caller runs migrations first).

    ``processes``: how many server processes of one host share the database's
    connection budget (``onejob serve --workers``); each gets its share of the pool.
    ``database``: the deadlines of every wait on the database (``DatabaseConfig``).
    """
    engine = make_engine(database_url, processes=processes, database=database)
    return SqlJobStore(engine, hub=hub, clock=clock, ids=ids, database=database)
