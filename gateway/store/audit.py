"""The store's audit trail: a job's events, oldest first, and an event recorded alone.

Every transition, replay, conflict, refusal and lost race appends its event in the
transaction of the change (``WriteTx.event``); one with no change of its own (a refused
fallback button) is recorded alone here.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from gateway.domain.records import EventRecord
from gateway.store.database import Database
from gateway.store.rows import aware_utc
from gateway.store.tables import job_events


class Audit:
    """The store's audit trail: ``events`` (oldest first) and ``record_event``."""

    db: Database

    async def events(
        self, job_id: str, after: int | None = None, owner_id: str | None = None
    ) -> list[EventRecord]:
        """Return a job's audit trail, oldest first (``after``: only events past that id;
        ``owner_id``, the job's, routes it to the owner's rows: docs/scaling.md)."""
        query = sa.select(job_events).where(job_events.c.job_id == job_id)
        if owner_id is not None:
            query = query.where(job_events.c.owner_id == owner_id)
        if after is not None:
            query = query.where(job_events.c.id > after)
        async with self.db.read() as conn:
            rows = (await conn.execute(query.order_by(job_events.c.id))).all()
        return [
            EventRecord(
                id=r.id,
                job_id=r.job_id,
                attempt_id=r.attempt_id,
                kind=r.kind,
                detail=r.detail,
                at=aware_utc(r.at),  # type: ignore[arg-type]
            )
            for r in rows
        ]

    async def record_event(
        self, job_id: str, kind: str, detail: dict[str, Any], attempt_id: str | None = None
    ) -> None:
        """Append an audit event on its own (e.g. a refused request)."""
        async with self.db.write() as tx:
            await tx.event(job_id, kind, detail, attempt_id)
