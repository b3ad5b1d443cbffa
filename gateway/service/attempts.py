"""Acting on a job's attempts: a manual attempt (R4, R6), a cancel, an admin's resolution.

Each goes through the store's guarded transitions; what they refuse (an attempt in
progress, a decided job) comes back as the store's result value, and only a request
problem (not found, not certified, not admin) raises.
"""

from __future__ import annotations

from typing import Any

from gateway.dispatch.routing import SkippedFallback, record_skipped
from gateway.domain.records import (
    AddAttemptOutcome,
    AddAttemptResult,
    AttemptRecord,
    JobRecord,
    Principal,
    TransitionOutcome,
    TransitionResult,
)
from gateway.domain.states import AttemptReason, AttemptState, JobStatus
from gateway.errors import (
    BadRequest,
    FallbackNotCertified,
    InvalidInput,
    NotFound,
    UnknownContract,
)
from gateway.service.base import ServiceBase, check_id

RESOLVE_OUTCOMES = frozenset({AttemptState.FAILED, AttemptState.CANCELLED, AttemptState.SUCCEEDED})


class Attempts(ServiceBase):
    """Request an attempt, cancel a job, list and resolve attempts (admin)."""

    async def request_attempt(
        self, principal: Principal, job_id: str, provider: str
    ) -> AddAttemptResult:
        """Add a manual attempt if R4 allows and the provider may stand in for the primary."""
        fallback = self._provider(provider)
        job = await self.get_job(principal, job_id)
        if provider != job.provider:
            primary = self.settings.providers.get(job.provider)
            contract = self.catalog.get(job.contract)
            if primary is None or contract is None:
                raise FallbackNotCertified(
                    f"{job.contract} on {job.provider} is no longer configured."
                )
            verdict = self.certifications.can_failover(contract, primary, fallback)
            if not verdict.allowed:
                await self.store.record_event(
                    job.id,
                    "attempt_refused",
                    {
                        "why": "fallback not certified",
                        "provider": provider,
                        "certification": verdict.reason,
                        "reason": AttemptReason.MANUAL.value,
                    },
                )
                raise FallbackNotCertified(
                    f"{provider} may not replace {job.provider} for {job.contract}: "
                    f"{verdict.reason}"
                )
        result = await self.store.add_attempt(
            job.id, provider, AttemptReason.MANUAL, owner_id=principal.owner_id
        )
        if result.outcome is AddAttemptOutcome.NOT_FOUND:
            raise NotFound(f"No job {job_id!r}.")
        return result

    async def cancel(self, principal: Principal, job_id: str) -> TransitionResult:
        """Cancel the caller's job through CAS; a conflict means it was already decided."""
        check_id(job_id, "job")
        result = await self.store.cancel(job_id, principal.owner_id)
        if result.outcome is TransitionOutcome.NOT_FOUND:
            raise NotFound(f"No job {job_id!r}.")
        if result.outcome is TransitionOutcome.DONE and result.job is not None:
            self.tracing.job_settled(result.job, decided_by="cancel")
        return result

    async def list_attempts(
        self, principal: Principal, state: str | None, *, limit: int = 100
    ) -> list[AttemptRecord]:
        """List attempts in ``state`` across all owners (admin)."""
        self.require_admin(principal)
        try:
            wanted = AttemptState(state) if state is not None else None
        except ValueError:
            raise BadRequest(
                f"state must be one of {', '.join(s.value for s in AttemptState)}."
            ) from None
        if not 1 <= limit <= 1000:
            raise BadRequest("limit must be between 1 and 1000.")
        return await self.store.list_attempts(wanted, limit=limit)

    async def resolve(
        self,
        principal: Principal,
        attempt_id: str,
        outcome: str,
        result: Any = None,
        note: str = "",
    ) -> TransitionResult:
        """Resolve an ``unknown`` attempt out of band (admin); ``succeeded`` goes through R5."""
        self.require_admin(principal)
        check_id(attempt_id, "attempt")
        try:
            target = AttemptState(outcome)
        except ValueError:
            target = None
        if target not in RESOLVE_OUTCOMES or target is None:
            raise InvalidInput("'outcome' must be one of failed, cancelled, succeeded.")
        if target is not AttemptState.SUCCEEDED and result is not None:
            raise InvalidInput("'result' is only accepted with outcome 'succeeded'.")
        attempt = await self.store.get_attempt(attempt_id)
        job = await self.store.get_job(attempt.job_id) if attempt is not None else None
        if attempt is None or job is None:
            raise NotFound(f"No attempt {attempt_id!r}.")
        next_provider: str | None = None
        skipped: list[SkippedFallback] = []
        if target is AttemptState.SUCCEEDED and not attempt.state.terminal:
            # A finished attempt never becomes unknown: the store refuses it (409) without
            # reading the result. Any other may be unknown by the time the store looks.
            self._check_result(job, result)
        elif target is AttemptState.FAILED and attempt.state is AttemptState.UNKNOWN:
            # A resolution to `failed` is a definite failure: fail over as the dispatcher
            # would (R6); the store re-checks the R4 guard in the same transaction.
            next_provider, skipped = self.routes.failover(job, attempt)
        res = await self.store.resolve(
            attempt_id, target, result=result, note=note, next_provider=next_provider
        )
        if res.outcome is TransitionOutcome.NOT_FOUND:
            raise NotFound(f"No attempt {attempt_id!r}.")
        if res.outcome is TransitionOutcome.DONE:
            await record_skipped(self.store, job, attempt_id, skipped)
            self.tracing.note(
                **{"resolved.attempt": attempt_id, "resolved.to": target.value},
                **{"failover.to": res.added.provider if res.added else None},
            )
            if res.job is not None and res.job.status in (JobStatus.SUCCEEDED, JobStatus.FAILED):
                self.tracing.job_settled(res.job, decided_by="operator")
        return res

    def _check_result(self, job: JobRecord, result: Any) -> None:
        """Validate a result an admin says an unknown attempt produced."""
        contract = self.catalog.get(job.contract)
        if contract is None:
            raise UnknownContract("The attempt's contract is no longer in the catalog.")
        errors = contract.validate_output(result)
        if errors:
            raise InvalidInput("result is not valid for the contract's output", errors=errors)
