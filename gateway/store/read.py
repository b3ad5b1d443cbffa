"""Reading jobs and attempts: a job with its attempts (by id, or by its owner's
Idempotency-Key), an owner's list or every owner's, attempts by state.

Reads run in a read-only transaction (SQLite: ``BEGIN DEFERRED``, so a read never takes
the write lock). An owner's jobs are listed newest first (ids are time-ordered ULIDs)
through the listing indexes, which compare the owner under ``COLLATE "C"`` on PostgreSQL
(``Database.owner``; migration 0004 says why).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from gateway.domain.records import AttemptRecord, JobRecord
from gateway.domain.states import AttemptState, JobStatus
from gateway.store.database import Database
from gateway.store.rows import (
    MAX_LIST_LIMIT,
    attempt_record,
    decode_cursor,
    encode_cursor,
    job_record,
)
from gateway.store.tables import attempts, jobs
from gateway.store.transaction import ATTEMPT_ROW, ATTEMPT_ROWS, load_job


class Reading:
    """The store's reads."""

    db: Database

    async def get_job(self, job_id: str, owner_id: str | None = None) -> JobRecord | None:
        """Load a job with its attempts (``owner_id`` None: any owner)."""
        async with self.db.read() as conn:
            return await load_job(conn, job_id, owner_id)

    async def list_jobs(
        self, owner_id: str | None, *, status: JobStatus | None, limit: int, cursor: str | None
    ) -> tuple[list[JobRecord], str | None]:
        """List an owner's jobs (``owner_id`` None: every owner's) newest first (ids are
        time-ordered ULIDs)."""
        limit = max(1, min(limit, MAX_LIST_LIMIT))
        query = sa.select(jobs)
        if owner_id is not None:
            # PostgreSQL's listing indexes compare the owner under "C" (migration 0004).
            query = query.where(self.db.owner() == owner_id)
        if status is not None:
            query = query.where(jobs.c.status == status.value)
        after = decode_cursor(cursor) if cursor is not None else None
        if after is not None:
            query = query.where(jobs.c.id < after)
        query = query.order_by(jobs.c.id.desc()).limit(limit + 1)
        async with self.db.read() as conn:
            if after is not None:
                # A cursor names a job of this owner's list; a made-up one is refused,
                # not answered with an empty page that looks like the end.
                mine = sa.select(jobs.c.id).where(jobs.c.id == after)
                if owner_id is not None:
                    mine = mine.where(jobs.c.owner_id == owner_id)
                if (await conn.execute(mine)).first() is None:
                    raise ValueError("invalid cursor")
            rows = (await conn.execute(query)).all()
            page = rows[:limit]
            ids = [r.id for r in page]
            attempt_rows = (
                (
                    await conn.execute(
                        sa.select(attempts)
                        .where(
                            *([attempts.c.owner_id == owner_id] if owner_id is not None else []),
                            attempts.c.job_id.in_(ids),
                        )
                        .order_by(attempts.c.job_id, attempts.c.number)
                    )
                ).all()
                if ids
                else []
            )
        by_job: dict[str, list[Any]] = {}
        for a in attempt_rows:
            by_job.setdefault(a.job_id, []).append(a)
        result = [job_record(r, by_job.get(r.id, [])) for r in page]
        next_cursor = encode_cursor(page[-1].id) if len(rows) > limit else None
        return result, next_cursor

    async def get_job_by_key(self, owner_id: str, idempotency_key: str) -> JobRecord | None:
        """Load the job an owner's Idempotency-Key made, with its attempts (None: none).

        The (owner_id, idempotency_key) UNIQUE constraint's index answers it on both
        databases: the owner is compared as that index compares it (no ``COLLATE "C"``).
        """
        query = sa.select(jobs).where(
            jobs.c.owner_id == owner_id, jobs.c.idempotency_key == idempotency_key
        )
        async with self.db.read() as conn:
            row = (await conn.execute(query)).one_or_none()
            if row is None:
                return None
            params = {"job_id": row.id, "owner_id": owner_id}
            rows = (await conn.execute(ATTEMPT_ROWS, params)).all()
        return job_record(row, rows)

    async def get_attempt(self, attempt_id: str) -> AttemptRecord | None:
        """Load one attempt by id (any owner)."""
        async with self.db.read() as conn:
            row = (await conn.execute(ATTEMPT_ROW, {"attempt_id": attempt_id})).one_or_none()
        return None if row is None else attempt_record(row)

    async def list_attempts(
        self, state: AttemptState | None, *, limit: int = 100
    ) -> list[AttemptRecord]:
        """List attempts in a state, all owners, oldest first."""
        query = sa.select(attempts).order_by(attempts.c.created_at, attempts.c.id)
        if state is not None:
            query = query.where(attempts.c.state == state.value)
        async with self.db.read() as conn:
            rows = (await conn.execute(query.limit(max(1, min(limit, 1000))))).all()
        return [attempt_record(r) for r in rows]

    async def count_attempts(self, state: AttemptState) -> int:
        """Count attempts in ``state`` (for the metrics gauge)."""
        async with self.db.read() as conn:
            return int(
                (
                    await conn.execute(
                        sa.select(sa.func.count()).where(attempts.c.state == state.value)
                    )
                ).scalar_one()
            )
