"""Production samples for certification (issue 48): the newest jobs a primary answered.

``onejob certify --production N`` sends the inputs of real succeeded jobs to a fallback and
judges its answers against the results the primary wrote; this reads them. It writes
nothing: the certificate keeps field names and hashes only, and retention deletes the jobs
as it always does (``gateway.store.prune``).
"""

from __future__ import annotations

from gateway.domain.shadow_records import ShadowCandidate
from gateway.store.database import Database
from gateway.store.shadow import read_candidates, won_by_their_primary
from gateway.store.tables import jobs


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
        query = (
            won_by_their_primary()
            .where(jobs.c.contract == contract, jobs.c.provider == primary)
            .order_by(jobs.c.updated_at.desc(), jobs.c.id.desc())
            .limit(limit)
        )
        return await read_candidates(self.db, query)
