"""Production samples for certification (issue 48): the newest jobs a primary answered.

``onejob certify --production N`` sends the inputs of real succeeded jobs to a fallback and
judges its answers against the results the primary wrote; this reads them. It writes
nothing: the certificate keeps field names and hashes only, and retention deletes the jobs
as it always does (``gateway.store.prune``).
"""

from __future__ import annotations

import sqlalchemy as sa

from gateway.domain.clock import aware
from gateway.domain.shadow_records import ShadowCandidate
from gateway.domain.states import JobStatus
from gateway.store.database import Database
from gateway.store.tables import attempts, jobs


class ProductionSamples:
    """Read the newest succeeded jobs whose primary wrote the result."""

    db: Database

    async def production_samples(
        self, contract: str, primary: str, *, limit: int
    ) -> list[ShadowCandidate]:
        """Return up to ``limit`` succeeded jobs of ``contract`` that ``primary`` won (it was
        the job's provider and its attempt wrote the result), newest first."""
        if limit <= 0:
            return []
        won_by = attempts.alias("won_by")
        query = (
            sa.select(
                jobs.c.id,
                jobs.c.contract,
                jobs.c.provider,
                jobs.c.input,
                jobs.c.result,
                jobs.c.updated_at,
            )
            .select_from(jobs.join(won_by, won_by.c.id == jobs.c.completed_by))
            .where(
                jobs.c.status == JobStatus.SUCCEEDED.value,
                jobs.c.contract == contract,
                jobs.c.provider == primary,
                won_by.c.provider == primary,
            )
            .order_by(jobs.c.updated_at.desc(), jobs.c.id.desc())
            .limit(limit)
        )
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [
            ShadowCandidate(r.id, r.contract, r.provider, r.input, r.result, aware(r.updated_at))
            for r in rows
        ]
