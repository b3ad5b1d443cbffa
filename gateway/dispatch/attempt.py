"""One claimed attempt's life: its call budget, its provider call, and which outcome it gets.

1. The provider and the contract must be configured here, and a fallback still certified
   (R6); otherwise the attempt fails definitely and nothing is sent.
2. The call gets what is left of the attempt's deadline, or a fresh one first
   (``call_budget``); the request carries the downstream key ``<job id>/<attempt number>``.
3. While the call is in flight the lease is renewed (``lease``) and, where the route
   hedges, a hedge may start (``hedging``).
4. A contract-valid answer goes through the compare-and-swap, a definite failure or a
   contract violation fails over, anything else is ``unknown`` (``outcomes``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from gateway.dispatch.calling import call_provider, output_violations
from gateway.dispatch.hedging import Hedging
from gateway.dispatch.lease import LeaseRenewal
from gateway.dispatch.outcomes import Outcomes
from gateway.dispatch.routing import Routes
from gateway.domain.clock import aware
from gateway.domain.ports import Clock, ContractSpec, JobStore, Provider
from gateway.domain.records import AttemptRecord, ClaimedAttempt, JobRecord
from gateway.metrics import Metrics
from gateway.settings import Settings
from providers.base import ProviderRequest
from providers.config import ProviderConfig

#: The dispatcher's log lines share one logger, whichever module writes them.
log = logging.getLogger("gateway.dispatcher")

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
    ) -> None:
        self.store = store
        self.providers = providers
        self.provider_configs = provider_configs
        self.catalog = catalog
        self.routes = routes
        self.config = settings.dispatcher
        self.metrics = metrics
        self.clock = clock
        self.worker_id = worker_id
        self.in_flight = 0  #: attempts between their claim and their committed outcome
        self.outcomes = Outcomes(
            store=store,
            routes=routes,
            provider_configs=provider_configs,
            settings=settings,
            metrics=metrics,
            worker_id=worker_id,
        )
        self.hedging = Hedging(
            store=store, settings=settings, routes=routes, catalog=catalog, stopping=stopping
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
        try:
            return await self._run(claimed, began, prompt)
        finally:
            self.in_flight -= 1
            self.metrics.attempts_in_flight.dec()

    async def _run(
        self, claimed: ClaimedAttempt, started: float, prompt: Prompt | None = None
    ) -> JobRecord | None:
        attempt, job = claimed.attempt, claimed.job
        ids = {"job_id": job.id, "attempt_id": attempt.id, "provider": attempt.provider}
        if attempt.started_at is not None:
            queued = (aware(attempt.started_at) - aware(attempt.created_at)).total_seconds()
            self.metrics.queue_seconds.observe(max(queued, 0.0))
        log.info("attempt claimed", extra={**ids, "number": attempt.number})

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
        remaining = await self._call_budget(attempt, cfg.timeout, ids)
        if remaining is None:
            return None  # not sent: back in the queue once the database answers
        try:
            request = contract.provider_request(
                job.input,
                model=cfg.model,
                timeout=remaining,
                idempotency_key=attempt.downstream_key,
                prompt=prompt.of(contract, job.input) if prompt is not None else None,
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
                job, attempt, contract, provider, request, remaining, started, ids
            )
        finally:
            await renewal.stop()

    async def _call_budget(
        self, attempt: AttemptRecord, timeout: float, ids: dict[str, str]
    ) -> float | None:
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
            log.warning("lease lost before the call; not sent", extra=ids)
            return None
        log.info("deadline renewed before the call", extra={**ids, "left_s": round(left, 3)})
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
        ids: dict[str, str],
    ) -> JobRecord | None:
        answered = asyncio.Event()
        target = self.routes.hedge_target(job, attempt, contract)
        hedger = (
            asyncio.create_task(self.hedging.hedge(job, attempt, answered))
            if target is not None
            else None
        )
        try:
            outcome = await call_provider(provider, request, remaining, ids)
        finally:
            answered.set()
            if hedger is not None:
                # A hedge being added must land before we pick a failover (R4 sees it).
                await asyncio.gather(hedger, return_exceptions=True)
        result, error, provider_s = outcome.result, outcome.error, outcome.seconds
        definite = outcome.definite

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
