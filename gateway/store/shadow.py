"""Shadow checks in the store (issue 38): the jobs to sample, each check's row, the tallies.

A check never touches its job: its row lives in ``shadow_checks``, inserted before the
call (the unique ``(job_id, fallback_provider)`` lets one process claim it, as the
idempotency key's constraint decides a creation) and finished with the outcome. Retention
deletes the rows with their job (``gateway.store.prune``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from gateway.domain.clock import aware
from gateway.domain.jsontext import scrub
from gateway.domain.shadow_records import JUDGED, ShadowCandidate, ShadowOutcome, ShadowTally
from gateway.domain.states import JobStatus
from gateway.store.database import Database
from gateway.store.rows import naive_utc
from gateway.store.tables import attempts, jobs, shadow_checks

KEY_PREFIX = "shadow-"  #: a check's downstream key: ``shadow-<check id>``


def won_by_their_primary() -> sa.Select[Any]:
    """Succeeded jobs whose primary wrote the result (it was the job's provider and its
    attempt won), as candidates: what shadow checks sample and ``certify --production``
    draws."""
    won_by = attempts.alias("won_by")
    return (
        sa.select(
            jobs.c.id,
            jobs.c.contract,
            jobs.c.provider,
            jobs.c.input,
            jobs.c.result,
            jobs.c.updated_at,
        )
        .select_from(jobs.join(won_by, won_by.c.id == jobs.c.completed_by))
        .where(jobs.c.status == JobStatus.SUCCEEDED.value, won_by.c.provider == jobs.c.provider)
    )


async def read_candidates(db: Database, query: sa.Select[Any]) -> list[ShadowCandidate]:
    """Run a ``won_by_their_primary`` query; return its rows as candidates."""
    async with db.read() as conn:
        rows = (await conn.execute(query)).all()
    return [
        ShadowCandidate(r.id, r.contract, r.provider, r.input, r.result, aware(r.updated_at))
        for r in rows
    ]


class ShadowChecks:
    """Sample succeeded jobs, claim and finish checks, count them for budgets and rates."""

    db: Database

    async def shadow_candidates(
        self, after: tuple[dt.datetime, str], contracts: Sequence[str], *, limit: int
    ) -> list[ShadowCandidate]:
        """Return succeeded jobs past ``after`` (``updated_at``, id) that their primary won."""
        if not contracts:
            return []
        query = (
            won_by_their_primary()
            .where(
                jobs.c.contract.in_(list(contracts)),
                sa.tuple_(jobs.c.updated_at, jobs.c.id)
                > sa.tuple_(sa.literal(naive_utc(after[0])), sa.literal(after[1])),
            )
            .order_by(jobs.c.updated_at, jobs.c.id)
            .limit(limit)
        )
        return await read_candidates(self.db, query)

    async def begin_shadow_check(
        self, job_id: str, contract: str, primary: str, fallback: str
    ) -> tuple[str, str] | None:
        """Claim the check of ``job_id`` on ``fallback``; return (check id, downstream key),
        or None when it was claimed before (by this process or another)."""
        check_id = self.db.ids.new("shc")
        values = {
            "id": check_id,
            "job_id": job_id,
            # The job's owner, looked up by id: the sampling spans owners (docs/scaling.md).
            "owner_id": sa.select(jobs.c.owner_id).where(jobs.c.id == job_id).scalar_subquery(),
            "contract": contract,
            "primary_provider": primary,
            "fallback_provider": fallback,
            "downstream_key": KEY_PREFIX + check_id,
            "outcome": ShadowOutcome.PENDING.value,
            "created_at": self.db.now(),
        }
        insert = self.db.insert(shadow_checks).values(**values).on_conflict_do_nothing()
        async with self.db.write() as tx:
            inserted = (await tx.conn.execute(insert)).rowcount
        return (check_id, KEY_PREFIX + check_id) if inserted == 1 else None

    async def finish_shadow_check(
        self, check_id: str, outcome: ShadowOutcome, detail: dict[str, Any]
    ) -> bool:
        """Record a pending check's outcome; False when it is not pending (any more)."""
        async with self.db.write() as tx:
            moved = await tx.conn.execute(
                shadow_checks.update()
                .where(
                    shadow_checks.c.id == check_id,
                    shadow_checks.c.outcome == ShadowOutcome.PENDING.value,
                )
                .values(outcome=outcome.value, detail=scrub(detail), finished_at=self.db.now())
            )
        return bool(moved.rowcount == 1)

    async def shadow_calls_since(self, since: dt.datetime) -> int:
        """Count the checks (calls) every process started since ``since`` (the budget)."""
        query = (
            sa.select(sa.func.count())
            .select_from(shadow_checks)
            .where(shadow_checks.c.created_at >= naive_utc(since))
        )
        async with self.db.read() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def shadow_tally(
        self, contract: str, primary: str, fallback: str, *, since: dt.datetime, window: int
    ) -> ShadowTally:
        """Tally the pair's newest ``window`` judged checks started since ``since``."""
        pair = (
            shadow_checks.c.contract == contract,
            shadow_checks.c.primary_provider == primary,
            shadow_checks.c.fallback_provider == fallback,
            shadow_checks.c.created_at >= naive_utc(since),
        )
        judged = (
            sa.select(shadow_checks.c.outcome, shadow_checks.c.detail)
            .where(*pair, shadow_checks.c.outcome.in_(JUDGED))
            .order_by(shadow_checks.c.created_at.desc(), shadow_checks.c.id.desc())
            .limit(window)
        )
        errors = (
            sa.select(sa.func.count())
            .select_from(shadow_checks)
            .where(*pair, shadow_checks.c.outcome == ShadowOutcome.ERROR.value)
        )
        async with self.db.read() as conn:
            rows = (await conn.execute(judged)).all()
            error_count = int((await conn.execute(errors)).scalar_one())
        fields: dict[str, int] = {}
        disagreements = 0
        for row in rows:
            if row.outcome != ShadowOutcome.DISAGREED.value:
                continue
            disagreements += 1
            for name in (row.detail or {}).get("fields") or ():
                fields[str(name)] = fields.get(str(name), 0) + 1
        return ShadowTally(len(rows), disagreements, error_count, fields)
