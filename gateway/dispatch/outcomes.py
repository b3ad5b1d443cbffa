"""Writing an attempt's outcome: the compare-and-swap, a failure and its failover, unknown.

- a contract-valid answer: ``finalize``, the compare-and-swap (R5); the attempt
  ``succeeded`` (won) or ``lost`` (its payload dropped);
- a definite failure, or an answer that breaks the contract: ``fail``; the attempt
  ``failed``, and the store adds one on the next effective fallback (R6), if any;
- a timeout, a broken connection, an ambiguous status: ``unknown``; nothing automatic
  follows (R3);
- the provider said not now (a rate limit, an overload), or could not take the call and
  it was not sent: ``not_now`` (issue 43); the attempt waits (``waiting``), fails over
  at once, or the job fails with ``job_deadline`` (``gateway.domain.capacity``).

A write the database cannot take is tried again (``database_away``). Each counts the
attempt's metrics and logs one line.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Awaitable, Mapping
from typing import Any

from gateway.capacity.gate import Capacity
from gateway.dispatch.database_away import late_answer, persist
from gateway.dispatch.log_context import log
from gateway.dispatch.routing import Routes, SkippedFallback, record_skipped
from gateway.domain.capacity import Step, next_step
from gateway.domain.ports import Clock, JobStore
from gateway.domain.records import (
    AttemptRecord,
    FinalizeOutcome,
    FinalizeResult,
    JobRecord,
    TransitionOutcome,
    TransitionResult,
)
from gateway.domain.states import AttemptReason, JobStatus
from gateway.metrics import AttemptOutcome, Metrics
from gateway.notify import ChangeHub
from gateway.settings import Settings
from gateway.tracing import NO_TRACING, Tracing
from providers.base import ProviderResult
from providers.config import ProviderConfig
from providers.model_identity import model_matches

#: Loop turns the waiters a decision woke get before the decider's bookkeeping.
WAITERS_FIRST = 2

#: The dispatcher's log lines share one logger, whichever module writes them.


class Outcomes:
    """Record how an attempt ended, through the store's guarded transitions."""

    def __init__(
        self,
        *,
        store: JobStore,
        routes: Routes,
        provider_configs: Mapping[str, ProviderConfig],
        settings: Settings,
        metrics: Metrics,
        worker_id: str,
        capacity: Capacity,
        clock: Clock,
        hub: ChangeHub,
        tracing: Tracing = NO_TRACING,
    ) -> None:
        self.store = store
        self.tracing = tracing
        self.routes = routes
        self.provider_configs = provider_configs
        self.settings = settings
        self.config = settings.dispatcher
        self.metrics = metrics
        self.worker_id = worker_id
        self.capacity = capacity
        self.clock = clock
        self.hub = hub

    async def finalize(
        self,
        job: JobRecord,
        attempt: AttemptRecord,
        result: ProviderResult,
        started: float,
        provider_s: float,
    ) -> JobRecord | None:
        """Decide with a contract-valid answer through the compare-and-swap (R5)."""

        def decide() -> Awaitable[FinalizeResult]:
            return self.store.finalize(
                attempt.id,
                result.output,
                provider_request_id=result.request_id,
                reported_model=result.model,
            )

        try:
            fin = await decide()
        except Exception as exc:
            fin = await persist(self.store, self.config.decision_retry, "decision", decide, exc)
        if fin.outcome is FinalizeOutcome.STALE:
            fin = await late_answer(self.store, self.worker_id, attempt, result, fin)
        # The waiters this decision woke answer before the bookkeeping below (the model
        # check, metrics, logs): a loop turn for them to answer, one for what they wrote
        # to go out, whatever the server does with a turn's writes.
        for _ in range(WAITERS_FIRST):
            await asyncio.sleep(0)
        await self._check_model(job, attempt, result)
        outcome = {
            FinalizeOutcome.WON: AttemptOutcome.SUCCEEDED,
            FinalizeOutcome.LOST: AttemptOutcome.LOST,
            FinalizeOutcome.STALE: AttemptOutcome.STALE,
        }[fin.outcome]
        self.metrics.attempt_finished(
            attempt.provider,
            outcome,
            wall_s=time.perf_counter() - started,
            provider_s=provider_s,
        )
        if self.tracing.enabled:
            self.tracing.note(
                **{"cas.outcome": fin.outcome.value, "attempt.outcome": outcome.value}
            )
            if fin.outcome is FinalizeOutcome.WON and fin.job is not None:
                self.tracing.job_settled(fin.job, decided_by=attempt.id)
        if fin.outcome is FinalizeOutcome.STALE:
            log.warning("attempt finished after it was moved (lease lost?); answer dropped")
        else:
            log.info(
                "attempt finished",
                extra={"outcome": fin.outcome.value, "winner": fin.winner},
            )
        return fin.job

    async def _check_model(
        self,
        job: JobRecord,
        attempt: AttemptRecord,
        result: ProviderResult,
    ) -> None:
        """Count and record an answer from another model than the configured one.

        Certification refuses such a provider; at run time the answer is already decided
        (the contract checked it), so the mismatch is made visible, not turned into a
        failure: a metric, a ``model_mismatch`` audit event and a WARNING.
        """
        cfg = self.provider_configs.get(attempt.provider)
        if cfg is None or result.model is None:
            return
        identity = model_matches(cfg.protocol, cfg.model, result.model, cfg.model_aliases)
        if identity.matches:
            return
        self.metrics.model_mismatches.labels(attempt.provider).inc()
        log.warning(identity.reason, extra={"reported_model": result.model})
        detail = {"configured": cfg.model, "reported": result.model, "reason": identity.reason}
        try:
            await self.store.record_event(job.id, "model_mismatch", detail, attempt.id)
        except Exception:  # the decision is committed; a lost audit line is only logged
            log.exception("model mismatch could not be recorded")

    async def fail(
        self,
        job: JobRecord,
        attempt: AttemptRecord,
        error: dict[str, Any],
        started: float,
        provider_s: float | None,
        *,
        fail_over: bool = True,
    ) -> JobRecord | None:
        """Fail the attempt definitely and name the next effective fallback, if any (R6;
        none when ``fail_over`` is false: the job's deadline has come)."""
        skipped: list[SkippedFallback] = []

        async def record() -> TransitionResult:
            fresh = await self.store.get_job(job.id) if fail_over else None
            next_provider, passed_over = (
                self.routes.failover(fresh, attempt) if fresh is not None else (None, [])
            )
            skipped[:] = passed_over
            return await self.store.fail_attempt(attempt.id, error, next_provider=next_provider)

        try:
            res = await record()
        except Exception as exc:
            res = await persist(self.store, self.config.decision_retry, "failure", record, exc)
        self.metrics.attempt_finished(
            attempt.provider,
            AttemptOutcome.FAILED,
            wall_s=time.perf_counter() - started,
            provider_s=provider_s,
        )
        log.warning(
            "attempt failed",
            extra={
                "reason": error.get("reason"),
                "transition": res.outcome.value,
                "failover_to": res.added.provider if res.added else None,
                "failover_skipped": [s.provider for s in skipped] or None,
            },
        )
        if res.outcome is TransitionOutcome.DONE:  # this failure was recorded
            await record_skipped(self.store, job, attempt.id, skipped)
        if self.tracing.enabled:
            self._trace_failure(attempt, error, res)
        return res.job

    def _trace_failure(
        self, attempt: AttemptRecord, error: dict[str, Any], res: TransitionResult
    ) -> None:
        """Say on the attempt's span how it failed and what followed; a job that failed
        for good gets its span."""
        reason = error.get("reason")
        added = res.added
        self.tracing.note(
            **{
                "attempt.outcome": "failed",
                "attempt.error": reason,
                "transition": res.outcome.value,
                "failover.to": added.provider if added is not None else None,
                "failover.reason": (error.get("failover") or reason) if added else None,
            }
        )
        if res.job is not None and res.job.status is JobStatus.FAILED:
            self.tracing.job_settled(res.job, decided_by=attempt.id)

    async def unknown(
        self,
        job: JobRecord,
        attempt: AttemptRecord,
        error: dict[str, Any],
        started: float,
        provider_s: float,
    ) -> JobRecord | None:
        """Mark the attempt ``unknown``: nothing automatic follows (R3)."""

        def record() -> Awaitable[TransitionResult]:
            return self.store.mark_unknown(attempt.id, error)

        try:
            res = await record()
        except Exception as exc:
            res = await persist(
                self.store, self.config.decision_retry, "unknown outcome", record, exc
            )
        self.metrics.attempt_finished(
            attempt.provider,
            AttemptOutcome.UNKNOWN,
            wall_s=time.perf_counter() - started,
            provider_s=provider_s,
        )
        if self.tracing.enabled:
            self.tracing.note(
                **{"attempt.outcome": "unknown", "attempt.error": error.get("reason")},
                unknown=True,
            )
        log.warning(
            "attempt outcome unknown; awaiting resolution",
            extra={
                "reason": error.get("reason"),
                "transition": res.outcome.value,
            },
        )
        return res.job

    async def not_now(
        self,
        job: JobRecord,
        attempt: AttemptRecord,
        wait_s: float,
        error: dict[str, Any],
        started: float,
        provider_s: float | None,
    ) -> JobRecord | None:
        """The provider cannot take the attempt for ``wait_s`` seconds (it said so in
        ``error``, or it was not sent): wait, fail over, or expire (issue 43).

        A hedge never waits: it fails (the attempt it races is still out). Otherwise
        ``domain.capacity.next_step`` decides, with the job as it stands now: a certified
        fallback that can take the call now is taken at once when the wait is over
        ``patience`` or the provider's circuit is open; a wait the job's deadline would
        not see the end of fails the job (``job_deadline``); anything else waits.
        """
        reason = str(error.get("capacity") or error.get("reason") or "not_now")
        self.metrics.capacity.waited(attempt.provider, reason)
        if attempt.reason is AttemptReason.HEDGE:
            return await self.fail(job, attempt, error, started, provider_s)
        config = self.settings.capacity
        fresh = await self.store.get_job(job.id)
        if fresh is None:
            return None
        target, _ = self.routes.failover(fresh, attempt)
        blocked = self.capacity.blocked()
        can_fail_over = target is not None and blocked.get(target, 0.0) <= config.patience
        now = self.clock.now()
        step = next_step(
            wait_s,
            now=now,
            job_deadline=fresh.deadline_at,
            can_fail_over=can_fail_over,
            patience=0.0 if reason == "circuit_open" else config.patience,
        )
        if step is Step.FAILOVER:
            moved_on = {**error, "failover": "capacity"}
            return await self.fail(job, attempt, moved_on, started, provider_s)
        if step is Step.EXPIRE:
            expired = {
                "outcome": "definite",
                "reason": "job_deadline",
                "message": (
                    f"{attempt.provider} cannot take the call for {wait_s:.1f}s, past the "
                    "job's deadline"
                ),
                "previous": error,
            }
            return await self.fail(job, attempt, expired, started, provider_s, fail_over=False)
        ready_at = now + dt.timedelta(seconds=wait_s)

        def record() -> Awaitable[TransitionResult]:
            return self.store.wait_attempt(
                attempt.id, self.worker_id, ready_at=ready_at, error=error
            )

        try:
            res = await record()
        except Exception as exc:
            res = await persist(self.store, self.config.decision_retry, "wait", record, exc)
        if self.tracing.enabled:
            self.tracing.note(
                **{"attempt.outcome": "waiting", "wait.reason": reason, "wait.seconds": wait_s}
            )
        # This process's runners look again when the wait is over (others poll).
        asyncio.get_running_loop().call_later(wait_s, self.hub.publish_attempt)
        log.info(
            "attempt waits for capacity",
            extra={
                "reason": reason,
                "wait_s": round(wait_s, 3),
                "transition": res.outcome.value,
            },
        )
        return res.job
