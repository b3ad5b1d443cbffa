"""What the reconciler leaves in the store besides decisions: findings, and unknown ages."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from gateway.domain.jsontext import scrub
from gateway.store.database import Database
from gateway.store.rows import A
from gateway.store.tables import attempts
from gateway.store.transaction import by_attempt_id

log = logging.getLogger("onejob.store")


class ReconcilerFindings:
    """Record what asking a provider found; count unknown attempts by provider and age."""

    db: Database

    async def record_finding(self, attempt_id: str, finding: dict[str, Any]) -> bool:
        """Note the reconciler's finding on a still ``unknown`` attempt; False if it moved.

        The attempt's ``reconciler`` column always holds the latest finding; an audit event
        (``reconciler_checked``) is written only when the finding changes, so a long wait
        does not flood the job's trail with one line per pass.
        """
        async with self.db.write() as tx:
            conn = tx.conn
            current = (
                await conn.execute(
                    sa.select(attempts.c.job_id, attempts.c.reconciler).where(
                        attempts.c.id == attempt_id
                    )
                )
            ).one_or_none()
            if current is None:
                return False
            moved = await conn.execute(
                attempts.update()
                .where(*by_attempt_id(attempt_id), attempts.c.state == A.UNKNOWN.value)
                .values(reconciler=scrub(finding))
            )
            if moved.rowcount != 1:
                return False
            previous = current.reconciler or {}
            if previous.get("finding") != finding.get("finding"):
                await tx.event(current.job_id, "reconciler_checked", finding, attempt_id)
                tx.jobs.add(current.job_id)
            return True

    async def unknown_by_provider_and_age(
        self, bounds: Sequence[tuple[float, str]], older: str
    ) -> dict[tuple[str, str], int]:
        """Count ``unknown`` attempts per (provider, age label) since each was created.

        ``bounds`` are ``(seconds, label)`` pairs, ascending: an attempt younger than
        ``seconds`` gets that label; one older than every bound gets ``older``.
        """
        now = self.db.now()
        age = sa.case(
            *(
                (attempts.c.created_at > now - dt.timedelta(seconds=seconds), label)
                for seconds, label in bounds
            ),
            else_=older,
        )
        # Label in a subquery, group outside: PostgreSQL would not match a GROUP BY
        # expression whose bound parameters were numbered apart from the SELECT's.
        labelled = (
            sa.select(attempts.c.provider, age.label("age"))
            .where(attempts.c.state == A.UNKNOWN.value)
            .subquery()
        )
        query = sa.select(labelled.c.provider, labelled.c.age, sa.func.count()).group_by(
            labelled.c.provider, labelled.c.age
        )
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).all()
        return {(provider, label): int(n) for provider, label, n in rows}
