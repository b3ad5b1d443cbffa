"""One claimed attempt's life: its call budget, its provider call, and which outcome it gets.

1. The provider and the contract must be configured here, and a fallback still certified
   (R6); otherwise the attempt fails definitely and nothing is sent. Nothing is sent
   either once the job's deadline has come (``job_deadline``).
2. The provider must be able to take the call now (``Capacity.admit``: its pace, a pause
   it asked for, its circuit); if not, the attempt is not sent and waits, fails over, or
   expires (``Outcomes.not_now``, issue 43).
3. The call gets what is left of the attempt's deadline, or a fresh one first
   (``call_budget``), never past the job's deadline; the request carries the downstream
   key ``<job id>/<attempt number>``.
4. While the call is in flight the lease is renewed (``lease``) and, where the route
   hedges, a hedge may start (``hedging``).
5. A contract-valid answer goes through the compare-and-swap, a definite failure or a
   contract violation fails over, a "not now" waits (``Outcomes.not_now``), anything else
   is ``unknown`` (``outcomes``). Every outcome tells the provider's capacity what it says
   of the provider (its limits, its health).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from gateway.capacity.gate import SHORT_WAIT, Admission, Capacity
from gateway.dispatch.calling import call_provider, output_violations
from gateway.dispatch.hedging import Hedging
from gateway.dispatch.lease import LeaseRenewal
from gateway.dispatch.log_context import attempt_logged, log
from gateway.dispatch.outcomes import Outcomes
from gateway.dispatch.routing import Routes
from gateway.domain.clock import aware
from gateway.domain.ports import Clock, ContractSpec, JobStore, Provider
from gateway.domain.records import AttemptRecord, ClaimedAttempt, JobRecord
from gateway.metrics import Metrics
from gateway.notify import ChangeHub
from gateway.settings import Settings
from gateway.tracing import NO_TRACING, Tracing
from providers.base import ProviderRequest
from providers.config import ProviderConfig
from providers.tokenizers import Tokenizer, tokenizer_for

#: The dispatcher's log lines share one logger, whichever module writes them.

MIN_CALL_TIMEOUT = 0.001  # seconds: a deadline already past still times out, never blocks
#: Share of its provider's timeout an attempt must have left to be sent; with less it
#: gets a fresh deadline first (``call_budget``).
MIN_BUDGET_SHARE = 0.5


class AttemptExecutor:
    """Run claimed attempts to their outcome; count those in flight."""

    def __init__(
        self,
        *,
        store: JobStore,
        providers: Mapping[str, Provider],
        provider_configs: Mapping[str, ProviderConfig],
        catalog: Mapping[str, ContractSpec],
        routes: Routes,
        settings: Settings,
        metrics: Metrics,
        clock: Clock,
        worker_id: str,
        stopping: asyncio.Event,
        capacity: Capacity,
        hub: ChangeHub,
        tracing: Tracing = NO_TRACING,
    ) -> None:
        self.store = store
        self.tracing = tracing
        self.providers = providers
        self.provider_configs = provider_configs
        self.catalog = catalog
        self.routes = routes
        self.config = settings.dispatcher
        self.metrics = metrics
        self.clock = clock
        self.worker_id = worker_id
        self.capacity = capacity
        self.in_flight = 0  #: attempts between their claim and their committed outcome
        self._tokenizers: dict[str, Tokenizer] = {}
        self.outcomes = Outcomes(
            store=store,
            routes=routes,
            provider_configs=provider_configs,
            settings=settings,
            metrics=metrics,
            worker_id=worker_id,
            capacity=capacity,
            clock=clock,
            hub=hub,
            tracing=tracing,
        )
        self.hedging = Hedging(
            store=store,
            settings=settings,
            routes=routes,
            catalog=catalog,
            capacity=capacity,
            stopping=stopping,
        )

    async def execute(
        self, claimed: ClaimedAttempt, began: float, prompt: Prompt | None = None
    ) -> JobRecord | None:
        """Run ``claimed`` (claimed at ``began``, a ``perf_counter`` time) to its outcome.

        Return the job as the deciding transaction left it; None when the attempt ended
        without a decision this process saw (not sent, or reaped).
        """
        self.in_flight += 1
        self.metrics.attempts_in_flight.inc()
        attempt = claimed.attempt
        try:
            with (
                attempt_logged(attempt.job_id, attempt.id, attempt.provider),
                self.tracing.attempt(claimed.job, attempt),
            ):
                return await self._run(claimed, began, prompt)
        finally:
            self.in_flight -= 1
            self.metrics.attempts_in_flight.dec()

    async def _run(
        self, claimed: ClaimedAttempt, started: float, prompt: Prompt | None = None
    ) -> JobRecord | None:
        attempt, job = claimed.attempt, claimed.job
        if attempt.started_at is not None:
            queued = (aware(attempt.started_at) - aware(attempt.created_at)).total_seconds()
            self.metrics.queue_seconds.observe(max(queued, 0.0))
        log.info("attempt claimed", extra={"number": attempt.number})

        contract = self.catalog.get(job.contract)
        provider = self.providers.get(attempt.provider)
        cfg = self.provider_configs.get(attempt.provider)
        if contract is None or provider is None or cfg is None:
            return await self.outcomes.fail(
                job,
                attempt,
                {
                    "reason": "not_configured",
                    "message": (
                        f"contract {job.contract!r} or provider {attempt.provider!r} "
                        "is not configured in this process"
                    ),
                },
                started,
                None,
            )
        if not self.routes.may_send(job, attempt, contract):
            # Certified when it was created, but not any more: never call it (R6).
            return await self.outcomes.fail(
                job,
                attempt,
                {
                    "outcome": "definite",
                    "reason": "not_certified",
                    "message": f"{attempt.provider} is not certified to replace {job.provider} "
                    f"for {job.contract}",
                },
                started,
                None,
            )
        job_left = self._job_left(job)
        if job_left is not None and job_left <= MIN_CALL_TIMEOUT:
            return await self.outcomes.fail(
                job, attempt, job_deadline_error(), started, None, fail_over=False
            )
        try:
            rendered = prompt.of(contract, job.input) if prompt is not None else None
            tokens = 0
            if self.capacity.tokens_counted(attempt.provider):
                rendered = contract.render(job.input) if rendered is None else rendered
                tokens = self._tokens(cfg, rendered)
        except Exception as exc:  # nothing was sent: a definite failure
            return await self.outcomes.fail(
                job, attempt, {"reason": "render_failed", "message": str(exc)}, started, None
            )
        refused = await self._admit(attempt.provider, tokens)
        if refused is not None:  # the provider cannot take it now: not sent
            error = {
                "outcome": "definite",
                "reason": refused.reason,
                "message": (
                    f"{attempt.provider} cannot take a call for {refused.wait:.1f}s "
                    f"({refused.reason.replace('_', ' ')}); not sent"
                ),
                "sent": False,
            }
            return await self.outcomes.not_now(job, attempt, refused.wait, error, started, None)
        if attempt.number == 1:  # the job's first call goes now, waits included
            started_s = (self.clock.now() - aware(job.created_at)).total_seconds()
            self.metrics.capacity.started(started_s)
        try:
            timeout = cfg.timeout if job_left is None else min(cfg.timeout, job_left)
            remaining = await self._call_budget(attempt, timeout)
            if remaining is None:
                return None  # not sent: back in the queue once the database answers
            try:
                request = contract.provider_request(
                    job.input,
                    model=cfg.model,
                    timeout=remaining,
                    idempotency_key=attempt.downstream_key,
                    prompt=rendered,
                )
            except Exception as exc:  # nothing was sent: a definite failure
                return await self.outcomes.fail(
                    job, attempt, {"reason": "render_failed", "message": str(exc)}, started, None
                )

            # The lease is renewed until the outcome is committed, not just until the call
            # returns: under load the deciding transaction may itself wait for a connection.
            renewal = LeaseRenewal(self.store, self.worker_id, self.config.lease_ttl, attempt)
            try:
                return await self._call_and_decide(
                    job, attempt, contract, provider, request, remaining, started, renewal, cfg
                )
            finally:
                await renewal.stop()
        finally:
            self.capacity.done(attempt.provider)

    def _job_left(self, job: JobRecord) -> float | None:
        """Seconds left of the job's deadline (None: it has none)."""
        if job.deadline_at is None:
            return None
        return (aware(job.deadline_at) - self.clock.now()).total_seconds()

    async def _admit(self, provider: str, tokens: int) -> Admission | None:
        """Take the provider's go-ahead for the call (``Capacity.admit``); None once it is
        given. A pacing wait under ``SHORT_WAIT`` is slept here, holding the runner slot
        and the lease that long; anything longer comes back, for the attempt to wait
        without them (``Outcomes.not_now``)."""
        slept = 0.0
        while True:
            admission = self.capacity.admit(provider, tokens)
            if admission.wait <= 0:
                return None
            if admission.reason == "circuit_open" or slept + admission.wait > SHORT_WAIT:
                return admission
            await asyncio.sleep(admission.wait)
            slept += admission.wait

    def _tokens(self, cfg: ProviderConfig, rendered: Any) -> int:
        """What a call costs of a token limit: its prompt's tokens, counted with the
        provider's tokenizer, and the output it may take (``max_output_tokens``)."""
        tokenizer = self._tokenizers.get(cfg.name)
        if tokenizer is None:
            tokenizer = self._tokenizers[cfg.name] = tokenizer_for(cfg)
        text = rendered if isinstance(rendered, str) else json.dumps(rendered, default=str)
        return tokenizer.count(text) + cfg.max_output_tokens

    async def _call_budget(self, attempt: AttemptRecord, timeout: float) -> float | None:
        """Return the seconds the call may take; None when it must not be sent now.

        An attempt whose claim waited long for its call (a slow or vanishing database
        held its creating statement or its claim) may have too little of its deadline
        left: sent, it would time out at once and end ``unknown`` though the provider
        never saw it. Below ``MIN_BUDGET_SHARE`` of its provider's timeout it gets a
        fresh deadline first; if the database cannot record that, it is not sent, and
        goes back in the queue once the database answers (``never_sent``).
        """
        left = timeout
        if attempt.deadline_at is not None:
            left = (aware(attempt.deadline_at) - self.clock.now()).total_seconds()
        if left >= timeout * MIN_BUDGET_SHARE:
            return max(left, MIN_CALL_TIMEOUT)
        try:
            renewed = await self.store.extend_deadline(
                attempt.id, self.worker_id, deadline_s=timeout, lease_ttl=self.config.lease_ttl
            )
        except Exception as exc:
            if not self.store.unavailable(exc, "deadline renewal"):
                raise
            self.store.never_sent(attempt.id, self.worker_id, attempt.started_at)
            return None
        if not renewed:  # the lease was lost meanwhile: no longer this worker's to send
            log.warning("lease lost before the call; not sent")
            return None
        log.info("deadline renewed before the call", extra={"left_s": round(left, 3)})
        return timeout

    async def _call_and_decide(
        self,
        job: JobRecord,
        attempt: AttemptRecord,
        contract: ContractSpec,
        provider: Provider,
        request: ProviderRequest,
        remaining: float,
        started: float,
        renewal: LeaseRenewal,
        cfg: ProviderConfig,
    ) -> JobRecord | None:
        answered = asyncio.Event()
        target = self.routes.hedge_target(job, attempt, contract)
        hedger = (
            asyncio.create_task(self.hedging.hedge(job, attempt, answered))
            if target is not None
            else None
        )
        span = self.tracing.provider_call(
            cfg.protocol,
            request,
            **{"job.id": job.id, "attempt.number": attempt.number, "provider": cfg.name},
        )
        outcome = None
        try:
            sent = span.outgoing(request, job.traceparent, job.tracestate)
            outcome = await call_provider(provider, sent, remaining)
        finally:
            if outcome is None:
                span.ended(None, {"reason": "cancelled"}, unknown=True)
            else:
                unknown = outcome.result is None and not outcome.definite
                span.ended(outcome.result, outcome.error, unknown=unknown)
            renewal.call_returned()
            answered.set()
            if hedger is not None:
                # A hedge being added must land before we pick a failover (R4 sees it).
                await asyncio.gather(hedger, return_exceptions=True)
        result, error, provider_s = outcome.result, outcome.error, outcome.seconds
        definite = outcome.definite

        if result is not None:
            self.capacity.answered(attempt.provider, result.limits)
        elif outcome.not_now is not None and error is not None:
            said = outcome.not_now
            wait = self.capacity.refused(
                attempt.provider, said.capacity, said.retry_after, said.limits, waits=attempt.waits
            )
            return await self.outcomes.not_now(job, attempt, wait, error, started, provider_s)
        elif outcome.health is not None:
            self.capacity.failed(attempt.provider, outcome.health)

        if result is not None:
            violations = output_violations(contract, result.output)
            if violations:
                return await self.outcomes.fail(
                    job,
                    attempt,
                    {
                        "outcome": "definite",
                        "reason": "contract_violation",
                        "errors": violations,
                        "request_id": result.request_id,
                    },
                    started,
                    provider_s,
                )
            return await self.outcomes.finalize(job, attempt, result, started, provider_s)
        if definite and error is not None:
            return await self.outcomes.fail(job, attempt, error, started, provider_s)
        return await self.outcomes.unknown(job, attempt, error or {}, started, provider_s)


def job_deadline_error() -> dict[str, Any]:
    """The error of an attempt not sent because its job's deadline had come."""
    return {
        "outcome": "definite",
        "reason": "job_deadline",
        "message": "the job's deadline passed before this attempt could be sent",
    }


class Prompt:
    """A contract's prompt for a job about to be created, rendered when called
    (``ClaimSpec.meanwhile``: while the creating statement is on the wire).

    Rendering is pure CPU and has no effect outside this object, so rendering a job's
    prompt that turns out a replay or a conflict costs time, nothing else. A render that
    fails is left to the attempt, which renders again and fails with the error.
    """

    __slots__ = ("contract", "input", "rendered")

    def __init__(self, contract: ContractSpec, input: Any) -> None:
        self.contract, self.input = contract, input
        self.rendered: Any = None

    def __call__(self) -> None:
        try:
            self.rendered = self.contract.render(self.input)
        except Exception:  # the attempt renders again, and fails with the error
            self.rendered = None

    def of(self, contract: ContractSpec, input: Any) -> Any:
        """What was rendered for this very contract and input; None otherwise."""
        if contract is self.contract and input is self.input:
            return self.rendered
        return None
