"""Resolving an ``unknown`` attempt out of band: by an operator, or by evidence.

Only from ``unknown`` (else a conflict). ``succeeded`` goes through R5's compare-and-swap
(``finalize``: the result may still lose to another decision); ``failed`` may fail over at
once, the next attempt added in the same transaction; ``cancelled`` just closes it.
The reconciler's finding (``evidence``) is audited and kept on the attempt.
"""

from __future__ import annotations

from typing import Any

from gateway.domain.jsontext import scrub
from gateway.domain.records import TransitionOutcome, TransitionResult
from gateway.domain.states import AttemptState
from gateway.store.database import Database
from gateway.store.finalize import Decisions, lose
from gateway.store.rows import A
from gateway.store.tables import attempts


class Resolving:
    """The store's resolve use case."""

    db: Database
    decisions: Decisions

    async def resolve(
        self,
        attempt_id: str,
        outcome: AttemptState,
        *,
        result: Any = None,
        note: str = "",
        next_provider: str | None = None,
        evidence: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> TransitionResult:
        """Resolve an ``unknown`` attempt out of band (``succeeded`` goes through R5).

        ``next_provider`` (with outcome ``failed``) adds the failover attempt in the same
        transaction, so resolving unblocks the job and the next try at once. ``evidence``
        (the reconciler's finding) goes into the audit event and the attempt's
        ``reconciler`` column; ``error`` replaces the default error of a failed attempt.
        """
        if outcome not in (A.FAILED, A.CANCELLED, A.SUCCEEDED):
            raise ValueError(f"cannot resolve to {outcome.value}")
        async with self.db.write_for_attempt(attempt_id) as found:
            if found is None:
                return TransitionResult(TransitionOutcome.NOT_FOUND)
            tx, job_id = found
            current = await tx.attempt_row(attempt_id)
            if current.state != A.UNKNOWN.value:
                why = f"attempt is {current.state}, not unknown"
                return await tx.conflict(job_id, attempt_id, why)
            detail: dict[str, Any] = {"outcome": outcome.value, "note": note}
            if evidence is not None:
                detail["evidence"] = evidence
                await tx.conn.execute(
                    attempts.update()
                    .where(attempts.c.id == attempt_id)
                    .values(reconciler=scrub(evidence))
                )
            if outcome is A.SUCCEEDED:
                job_row = await self.decisions.cas(
                    tx.conn, job_id, current.read_version, attempt_id, result
                )
                if job_row is None:
                    await lose(tx, job_id, attempt_id, [A.UNKNOWN])
                    lost = {**detail, "won": False}
                    await tx.event(job_id, "attempt_resolved", lost, attempt_id)
                    return await tx.done(job_id, await tx.attempt_row(attempt_id))
                finished = {"finished_at": self.db.now()}
                row = await tx.move(attempt_id, [A.UNKNOWN], A.SUCCEEDED, finished)
                await tx.cancel_unsent(job_id, "decided")
                await tx.event(job_id, "attempt_resolved", {**detail, "won": True}, attempt_id)
                return await tx.done(job_id, row)
            error = {
                "reason": f"resolved_{outcome.value}",
                **(error or {}),
                "note": note,
                "previous": current.error,
            }
            closed = {"error": error, "finished_at": self.db.now()}
            row = await tx.move(attempt_id, [A.UNKNOWN], outcome, closed)
            await tx.event(job_id, "attempt_resolved", detail, attempt_id)
            added = None
            if outcome is A.FAILED and next_provider is not None:
                added = await tx.add_failover(job_id, next_provider)
            await tx.close_if_failed(job_id, error)
            done = await tx.done(job_id, row)
            return TransitionResult(done.outcome, done.job, done.attempt, added=added)
