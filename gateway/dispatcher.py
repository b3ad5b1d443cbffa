"""The attempt dispatcher: claim ``starting`` attempts, call providers, decide (DESIGN R3-R7).

Each of N runners loops: claim the oldest ``starting`` attempt (atomic in the store), call its
provider with the downstream key ``<job id>/<attempt number>`` while renewing the lease, then

- a contract-valid answer goes through the compare-and-swap (won, or lost and dropped);
- a definite failure, or an answer that breaks the output contract, fails the attempt and
  names the next *effective* fallback (configured and certified), up to ``max_attempts``;
- a timeout, broken connection or ambiguous status makes the attempt ``unknown``: nothing
  automatic follows, a person or a reconciler must resolve it.

A reaper turns attempts whose lease expired (their worker died) into ``unknown``. An idle
runner sleeps until the hub says an attempt was created, or ``poll_interval`` passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Mapping
from typing import Any, Protocol

from contracts.model import Contract
from gateway.domain.clock import Clock, SystemClock
from gateway.domain.ports import JobStore
from gateway.domain.records import (
    AddAttemptOutcome,
    AttemptRecord,
    ClaimedAttempt,
    FinalizeOutcome,
    JobRecord,
)
from gateway.domain.states import AttemptReason, AttemptState
from gateway.metrics import AttemptOutcome, Metrics
from gateway.notify import ChangeHub
from gateway.settings import Settings
from providers.base import (
    DefiniteFailure,
    OutcomeUnknown,
    Provider,
    ProviderError,
    ProviderResult,
)
from providers.config import ProviderConfig

log = logging.getLogger(__name__)

DEFAULT_DEADLINE = 30.0  # seconds, for a provider without configuration (never called)
MIN_CALL_TIMEOUT = 0.001  # seconds: a deadline already past still times out, never blocks
#: The adapter enforces the deadline itself and says how it ran out; this backstop only
#: fires if it does not, a little later.
DEADLINE_SLACK = 0.25  # seconds
ERROR_PAUSE = 0.5  # seconds a runner rests after an unexpected store error


class Verdict(Protocol):
    """What the certification registry says about one failover."""

    @property
    def allowed(self) -> bool: ...

    @property
    def reason(self) -> str: ...


class Certifications(Protocol):
    """The certification seam (DESIGN §6): may ``fallback`` replace ``primary`` for a contract."""

    def can_failover(
        self, contract: Contract, primary: ProviderConfig, fallback: ProviderConfig
    ) -> Verdict: ...


def _aware(value: dt.datetime) -> dt.datetime:
    """Read a stored timestamp (naive means UTC) as timezone-aware."""
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


class Dispatcher:
    """Run attempts with N concurrent runners and a lease reaper."""

    def __init__(
        self,
        *,
        store: JobStore,
        hub: ChangeHub,
        providers: Mapping[str, Provider],
        provider_configs: Mapping[str, ProviderConfig],
        catalog: Mapping[str, Contract],
        certifications: Certifications,
        settings: Settings,
        metrics: Metrics,
        clock: Clock | None = None,
        worker_id: str,
    ) -> None:
        self.store = store
        self.hub = hub
        self.providers = providers
        self.provider_configs = provider_configs
        self.catalog = catalog
        self.certifications = certifications
        self.settings = settings
        self.config = settings.dispatcher
        self.metrics = metrics
        self.clock: Clock = clock or SystemClock()
        self.worker_id = worker_id
        self._stopping = asyncio.Event()
        self._runners: list[asyncio.Task[None]] = []
        self._reaper: asyncio.Task[None] | None = None
        self._in_flight = 0

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the runners and the reaper."""
        if self._runners:
            return
        self._stopping.clear()
        self._runners = [
            asyncio.create_task(self._runner_loop(i), name=f"onejob-runner-{i}")
            for i in range(self.config.runners)
        ]
        self._reaper = asyncio.create_task(self._reaper_loop(), name="onejob-reaper")
        log.info(
            "dispatcher started",
            extra={"worker_id": self.worker_id, "runners": self.config.runners},
        )

    async def stop(self) -> None:
        """Stop claiming; let calls in flight finish up to ``shutdown_grace``, then cancel."""
        self._stopping.set()
        self.hub.publish_attempt()  # wake idle runners so they notice
        tasks = [*self._runners, *([self._reaper] if self._reaper else [])]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=self.config.shutdown_grace)
        for task in pending:
            task.cancel()
        if pending:
            # Their leases expire and a reaper (here on restart, or in another process)
            # turns those attempts into `unknown`: a cancelled call may still have landed.
            log.warning(
                "dispatcher stopped with calls in flight",
                extra={"worker_id": self.worker_id, "abandoned": self._in_flight},
            )
            await asyncio.gather(*pending, return_exceptions=True)
        self._runners = []
        self._reaper = None
        log.info("dispatcher stopped", extra={"worker_id": self.worker_id})

    @property
    def in_flight(self) -> int:
        """Count the attempts this dispatcher is running now."""
        return self._in_flight

    # -- routes and certification ----------------------------------------------------------

    def effective_fallbacks(self, contract_name: str, primary: str) -> list[str]:
        """Return the configured fallbacks the registry certifies for this primary, in order."""
        route = self.settings.route_for(contract_name)
        contract = self.catalog.get(contract_name)
        primary_cfg = self.provider_configs.get(primary)
        if route is None or contract is None or primary_cfg is None:
            return []
        # A job whose client named a non-default primary may still fall back on the route's.
        chain = route.fallbacks if primary == route.primary else (route.primary, *route.fallbacks)
        allowed: list[str] = []
        for name in chain:
            cfg = self.provider_configs.get(name)
            if name == primary or cfg is None or name in allowed:
                continue
            if self.certifications.can_failover(contract, primary_cfg, cfg).allowed:
                allowed.append(name)
        return allowed

    def _next_provider(self, job: JobRecord, failed: AttemptRecord) -> str | None:
        """Pick where a failover goes: the first effective fallback not tried yet, if allowed."""
        route = self.settings.route_for(job.contract)
        if route is None or len(job.attempts) >= route.max_attempts:
            return None
        others = [a for a in job.attempts if a.id != failed.id]
        if any(not a.state.terminal for a in others):
            return None  # another attempt (a hedge, say) is still in play; R4 forbids adding
        tried = {a.provider for a in job.attempts}
        for name in self.effective_fallbacks(job.contract, job.provider):
            if name not in tried:
                return name
        return None

    # -- runners ---------------------------------------------------------------------------

    async def _runner_loop(self, index: int) -> None:
        while not self._stopping.is_set():
            try:
                ran = await self.run_once()
            except Exception:
                log.exception("runner failed", extra={"worker_id": self.worker_id})
                await self._rest(ERROR_PAUSE)
                continue
            if not ran and not self._stopping.is_set():
                await self.hub.wait_attempt(self.config.poll_interval)

    async def _rest(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def run_once(self) -> bool:
        """Claim one attempt and run it to its outcome; say whether there was one."""
        deadlines = {name: cfg.timeout for name, cfg in self.provider_configs.items()}
        claimed = await self.store.claim_next_attempt(
            self.worker_id,
            lease_ttl=self.config.lease_ttl,
            deadline_s=deadlines,
            default_deadline_s=DEFAULT_DEADLINE,
        )
        if claimed is None:
            return False
        self._in_flight += 1
        self.metrics.attempts_in_flight.inc()
        try:
            await self._run(claimed)
        finally:
            self._in_flight -= 1
            self.metrics.attempts_in_flight.dec()
        return True

    async def _run(self, claimed: ClaimedAttempt) -> None:
        attempt, job = claimed.attempt, claimed.job
        started = time.perf_counter()
        ids = {"job_id": job.id, "attempt_id": attempt.id, "provider": attempt.provider}
        if attempt.started_at is not None:
            queued = (_aware(attempt.started_at) - _aware(attempt.created_at)).total_seconds()
            self.metrics.queue_seconds.observe(max(queued, 0.0))
        log.info("attempt claimed", extra={**ids, "number": attempt.number})

        contract = self.catalog.get(job.contract)
        provider = self.providers.get(attempt.provider)
        cfg = self.provider_configs.get(attempt.provider)
        if contract is None or provider is None or cfg is None:
            await self._fail(
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
            return
        remaining = MIN_CALL_TIMEOUT
        if attempt.deadline_at is not None:
            left = (_aware(attempt.deadline_at) - self.clock.now()).total_seconds()
            remaining = max(left, MIN_CALL_TIMEOUT)
        try:
            request = contract.provider_request(
                job.input,
                model=cfg.model,
                timeout=remaining,
                idempotency_key=attempt.downstream_key,
            )
        except Exception as exc:  # nothing was sent: a definite failure
            await self._fail(
                job, attempt, {"reason": "render_failed", "message": str(exc)}, started, None
            )
            return

        done = asyncio.Event()
        companions = [asyncio.create_task(self._renew_lease(attempt, done))]
        if self._should_hedge(job, attempt, contract):
            companions.append(asyncio.create_task(self._hedge(job, attempt, done)))
        call_started = time.perf_counter()
        result: ProviderResult | None = None
        error: dict[str, Any] | None = None
        definite = False
        try:
            async with asyncio.timeout(remaining + DEADLINE_SLACK):
                result = await provider.call(request)
        except TimeoutError:
            error = {
                "outcome": "unknown",
                "reason": "deadline",
                "message": f"no answer within {remaining:.3f} s",
            }
        except DefiniteFailure as exc:
            error, definite = exc.as_dict(), True
        except OutcomeUnknown as exc:
            error = exc.as_dict()
        except ProviderError as exc:  # an unclassified provider error: assume the worst
            error = {**exc.as_dict(), "outcome": "unknown"}
        except Exception as exc:  # a bug below us; the request may have left: unknown
            log.exception("provider call raised unexpectedly", extra=ids)
            error = {
                "outcome": "unknown",
                "reason": "unexpected_error",
                "message": f"{type(exc).__name__}: {exc}",
            }
        finally:
            provider_s = time.perf_counter() - call_started
            done.set()
            await asyncio.gather(*companions, return_exceptions=True)

        if result is not None:
            violations = contract.validate_output(result.output)
            if violations:
                await self._fail(
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
                return
            await self._finalize(job, attempt, result, started, provider_s)
        elif definite and error is not None:
            await self._fail(job, attempt, error, started, provider_s)
        else:
            await self._unknown(job, attempt, error or {}, started, provider_s)

    async def _finalize(
        self,
        job: JobRecord,
        attempt: AttemptRecord,
        result: ProviderResult,
        started: float,
        provider_s: float,
    ) -> None:
        ids = {"job_id": job.id, "attempt_id": attempt.id, "provider": attempt.provider}
        fin = await self.store.finalize(
            attempt.id, result.output, provider_request_id=result.request_id
        )
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
        if fin.outcome is FinalizeOutcome.STALE:
            log.warning(
                "attempt finished after it was moved (lease lost?); answer dropped", extra=ids
            )
        else:
            log.info(
                "attempt finished",
                extra={**ids, "outcome": fin.outcome.value, "winner": fin.winner},
            )

    async def _fail(
        self,
        job: JobRecord,
        attempt: AttemptRecord,
        error: dict[str, Any],
        started: float,
        provider_s: float | None,
    ) -> None:
        ids = {"job_id": job.id, "attempt_id": attempt.id, "provider": attempt.provider}
        fresh = await self.store.get_job(job.id)
        next_provider = self._next_provider(fresh, attempt) if fresh is not None else None
        res = await self.store.fail_attempt(attempt.id, error, next_provider=next_provider)
        self.metrics.attempt_finished(
            attempt.provider,
            AttemptOutcome.FAILED,
            wall_s=time.perf_counter() - started,
            provider_s=provider_s,
        )
        log.warning(
            "attempt failed",
            extra={
                **ids,
                "reason": error.get("reason"),
                "transition": res.outcome.value,
                "failover_to": res.added.provider if res.added else None,
            },
        )

    async def _unknown(
        self,
        job: JobRecord,
        attempt: AttemptRecord,
        error: dict[str, Any],
        started: float,
        provider_s: float,
    ) -> None:
        ids = {"job_id": job.id, "attempt_id": attempt.id, "provider": attempt.provider}
        res = await self.store.mark_unknown(attempt.id, error)
        self.metrics.attempt_finished(
            attempt.provider,
            AttemptOutcome.UNKNOWN,
            wall_s=time.perf_counter() - started,
            provider_s=provider_s,
        )
        log.warning(
            "attempt outcome unknown; awaiting resolution",
            extra={
                **ids,
                "reason": error.get("reason"),
                "transition": res.outcome.value,
            },
        )

    # -- companions of a call in flight ----------------------------------------------------

    async def _renew_lease(self, attempt: AttemptRecord, done: asyncio.Event) -> None:
        """Renew the lease every third of its TTL until the call is done."""
        every = self.config.lease_ttl / 3
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), every)
            if done.is_set():
                return
            try:
                held = await self.store.renew_lease(
                    attempt.id, self.worker_id, lease_ttl=self.config.lease_ttl
                )
            except Exception:
                log.exception(
                    "lease renewal failed",
                    extra={"job_id": attempt.job_id, "attempt_id": attempt.id},
                )
                continue
            if not held:
                log.warning(
                    "lease lost while the call is in flight",
                    extra={"job_id": attempt.job_id, "attempt_id": attempt.id},
                )
                return

    def _should_hedge(self, job: JobRecord, attempt: AttemptRecord, contract: Contract) -> bool:
        route = self.settings.route_for(job.contract)
        return (
            attempt.reason is AttemptReason.INITIAL
            and route is not None
            and route.hedge_after_s is not None
            and route.max_attempts >= 2
            and contract.hedgeable
            and bool(self.effective_fallbacks(job.contract, job.provider))
        )

    async def _hedge(self, job: JobRecord, attempt: AttemptRecord, done: asyncio.Event) -> None:
        """After ``hedge_after_s`` with the call still in flight, race it on the first fallback."""
        route = self.settings.route_for(job.contract)
        assert route is not None and route.hedge_after_s is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), route.hedge_after_s)
        if done.is_set() or self._stopping.is_set():
            return
        fallbacks = self.effective_fallbacks(job.contract, job.provider)
        if not fallbacks:
            return  # the certificate was withdrawn while we waited
        ids = {"job_id": job.id, "attempt_id": attempt.id}
        try:
            res = await self.store.add_attempt(
                job.id, fallbacks[0], AttemptReason.HEDGE, allow_running=True
            )
        except Exception:
            log.exception("hedge could not be added", extra=ids)
            return
        if res.outcome is AddAttemptOutcome.ADDED and res.attempt is not None:
            log.info(
                "hedge started",
                extra={**ids, "hedge_attempt_id": res.attempt.id, "hedge_provider": fallbacks[0]},
            )
        else:
            blocking = res.blocking
            log.info(
                "hedge refused",
                extra={
                    **ids,
                    "outcome": res.outcome.value,
                    "blocking_attempt_id": blocking.id if blocking else None,
                    "blocking_state": blocking.state.value if blocking else None,
                },
            )

    # -- reaper ----------------------------------------------------------------------------

    async def _reaper_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.reap_once()
                await self.metrics.refresh(self.store)
            except Exception:
                log.exception("reaper failed", extra={"worker_id": self.worker_id})
            await self._rest(self.config.reap_interval)

    async def reap_once(self) -> list[AttemptRecord]:
        """Turn running attempts whose lease expired into ``unknown``; return them."""
        reaped = await self.store.reap_expired_leases()
        for attempt in reaped:
            self.metrics.attempt_finished(attempt.provider, AttemptOutcome.UNKNOWN)
            log.warning(
                "lease expired; attempt outcome unknown",
                extra={
                    "job_id": attempt.job_id,
                    "attempt_id": attempt.id,
                    "provider": attempt.provider,
                    "lease_owner": attempt.lease_owner,
                    "state": AttemptState.UNKNOWN.value,
                },
            )
        return reaped
