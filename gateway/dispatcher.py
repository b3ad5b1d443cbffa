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
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from gateway.dispatch.calling import call_provider, output_violations
from gateway.dispatch.routing import Routes
from gateway.domain.clock import Clock, SystemClock, aware
from gateway.domain.ports import Certifications, ContractSpec, JobStore
from gateway.domain.records import (
    AddAttemptOutcome,
    AttemptRecord,
    ClaimedAttempt,
    ClaimSpec,
    FinalizeOutcome,
    FinalizeResult,
    JobRecord,
    NewJob,
    TransitionOutcome,
    TransitionResult,
)
from gateway.domain.states import AttemptReason, AttemptState
from gateway.metrics import AttemptOutcome, Metrics
from gateway.notify import ChangeHub
from gateway.settings import Settings
from providers.base import Provider, ProviderRequest, ProviderResult
from providers.config import ProviderConfig
from providers.models import model_matches

__all__ = ["Dispatcher"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

DEFAULT_DEADLINE = 30.0  # seconds, for a provider without configuration (never called)
MIN_CALL_TIMEOUT = 0.001  # seconds: a deadline already past still times out, never blocks
#: Share of its provider's timeout an attempt must have left to be sent; with less it
#: gets a fresh deadline first (``_call_budget``).
MIN_BUDGET_SHARE = 0.5
#: Seconds between tries of a decision the database could not take (a failover, a
#: partition), doubling up to ``DECISION_RETRY_MAX``, for ``dispatcher.decision_retry``.
DECISION_RETRY_FIRST = 0.25
DECISION_RETRY_MAX = 2.0
ERROR_PAUSE = 0.5  # seconds a runner rests after an unexpected store error
#: How long a new job waits for a runner slot before it is queued instead (seconds). A
#: queued job costs a claim transaction, and its runner takes the next freed slot ahead
#: of the next new job, which may then be queued too: 5 ms let that cycle run on a slow
#: host (docs/dispatcher.md).
RESERVE_WAIT = 0.1
#: Polls in a row that may pass while every slot is busy before one waits for a slot.
MAX_SKIPPED_LOOKS = 3


class Dispatcher:
    """Run attempts with N concurrent runners and a lease reaper."""

    def __init__(
        self,
        *,
        store: JobStore,
        hub: ChangeHub,
        providers: Mapping[str, Provider],
        provider_configs: Mapping[str, ProviderConfig],
        catalog: Mapping[str, ContractSpec],
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
        self._claim_baton = asyncio.Lock()
        #: One slot per runner: taken by a claimed attempt, from the store's queue or
        #: claimed in-process at creation (``reserve``), until its outcome is committed.
        self._slots = asyncio.Semaphore(self.config.runners)
        #: Whether an attempt may be queued (shared by the runners, who pass the baton):
        #: true at start, after a wake-up and after a claim that found one.
        self._maybe_queued = True
        self._skipped_looks = 0  # polls in a row that found every slot busy and passed
        self._local: set[asyncio.Task[JobRecord | None]] = set()
        self.routes = Routes(settings, catalog, provider_configs, certifications)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the runners and the reaper."""
        if self._runners:
            return
        self._stopping.clear()
        self._maybe_queued = True
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
        tasks = [*self._runners, *self._local, *([self._reaper] if self._reaper else [])]
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
        return self.routes.effective_fallbacks(contract_name, primary)

    # -- runners ---------------------------------------------------------------------------

    async def _runner_loop(self, index: int) -> None:
        # One idle runner per process at a time holds the claim baton: it claims, or
        # sleeps on the hub. A wake-up then costs one claim transaction, not one per idle
        # runner (a thundering herd that serializes on SQLite's write lock).
        #
        # A wake-up means an attempt was queued: the runner waits for a slot, and gets the
        # next one freed before a new job's in-process first attempt (queued work first).
        # A periodic look (the poll interval passed with no wake-up) only looks when a
        # slot is free: waiting for one would take it from the next new job only to find
        # nothing queued, and send that job through the queue instead (measured at 16
        # connections on 16 runners: a claim transaction for a share of all jobs). After
        # MAX_SKIPPED_LOOKS such polls in a row it waits for a slot anyway, so an attempt
        # whose wake-up was lost is claimed within a few poll intervals under any load.
        while not self._stopping.is_set():
            try:
                async with self._claim_baton:
                    if self._stopping.is_set():
                        return
                    if (
                        not self._maybe_queued
                        and self._slots.locked()
                        and self._skipped_looks < MAX_SKIPPED_LOOKS
                    ):
                        self._skipped_looks += 1
                        self._maybe_queued = await self.hub.wait_attempt(self.config.poll_interval)
                        continue
                    self._skipped_looks = 0
                    await self._slots.acquire()
                    if self._stopping.is_set():  # stopped while waiting: claim nothing
                        self._slots.release()
                        return
                    try:
                        claimed, began = await self._claim()
                    except BaseException:
                        self._slots.release()
                        raise
                    # Found one: the next runner looks again at once. Found none: wait.
                    self._maybe_queued = claimed is not None
                    if claimed is None:
                        self._slots.release()
                        self._maybe_queued = await self.hub.wait_attempt(self.config.poll_interval)
                        continue
                try:
                    await self._execute(claimed, began)
                finally:
                    self._slots.release()
            except Exception as exc:
                if not self.store.unavailable(exc, "runner"):
                    log.exception("runner failed", extra={"worker_id": self.worker_id})
                await self._rest(ERROR_PAUSE)

    # -- in-process first attempts ---------------------------------------------------------

    async def reserve(self, provider: str, job: NewJob | None = None) -> ClaimSpec | None:
        """Take a runner slot for a job about to be created; None when none is free
        within ``RESERVE_WAIT`` (the job is queued for any runner).

        With ``job``, the spec's ``meanwhile`` renders its contract's prompt (``_Prompt``),
        which the store runs while the creating statement is on the wire, if the loop has
        nothing else to do then; the attempt, once claimed, uses what it rendered.

        The caller passes the returned spec to ``create_or_get`` and then hands the claimed
        attempt to ``run_claimed``, or gives the slot back with ``release`` when nothing
        was claimed (a replay, a conflict, an error).
        """
        if self._stopping.is_set() or not self._runners:
            return None
        if self._slots.locked():
            # A slot held by a claim that finds nothing, or by an attempt just deciding,
            # comes back within milliseconds; without this wait, that job and every next
            # one would go through the queue (a claim each) while the slots stay full.
            try:
                async with asyncio.timeout(RESERVE_WAIT):
                    await self._slots.acquire()
            except TimeoutError:
                return None
            if self._stopping.is_set():
                self._slots.release()
                return None
        else:
            await self._slots.acquire()  # a free slot: this does not wait
        cfg = self.provider_configs.get(provider)
        contract = self.catalog.get(job.contract) if job is not None else None
        return ClaimSpec(
            worker_id=self.worker_id,
            lease_ttl=self.config.lease_ttl,
            deadline_s=cfg.timeout if cfg is not None else DEFAULT_DEADLINE,
            meanwhile=(
                _Prompt(contract, job.input)
                if job is not None and contract and self.settings.shortcuts.prompt_meanwhile
                else None
            ),
        )

    def release(self) -> None:
        """Give back a slot ``reserve`` took when no attempt was claimed with it."""
        self._slots.release()

    def run_claimed(
        self, claimed: ClaimedAttempt, spec: ClaimSpec | None = None
    ) -> asyncio.Task[JobRecord | None]:
        """Run an attempt claimed at creation in this process, in the slot ``reserve`` took
        (``spec``, what it returned: its prompt, if it was rendered meanwhile).

        Return the task; its result is the job as the deciding transaction left it (None
        when the attempt ended without a decision this process saw, e.g. reaped).
        """
        prompt = spec.meanwhile if spec is not None else None

        async def run() -> JobRecord | None:
            try:
                return await self._execute(
                    claimed,
                    time.perf_counter(),
                    prompt if isinstance(prompt, _Prompt) else None,
                )
            except Exception as exc:
                # As in a runner: the lease expires and the reaper makes it `unknown`.
                if not self.store.unavailable(exc, "in-process attempt"):
                    log.exception("in-process attempt failed", extra={"worker_id": self.worker_id})
                return None
            finally:
                self._slots.release()

        task = asyncio.create_task(run(), name=f"onejob-local-{claimed.attempt.id}")
        self._local.add(task)
        task.add_done_callback(self._local.discard)
        return task

    async def _rest(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def run_once(self) -> bool:
        """Claim one attempt and run it to its outcome; say whether there was one."""
        claimed, began = await self._claim()
        if claimed is None:
            return False
        await self._execute(claimed, began)
        return True

    async def _claim(self) -> tuple[ClaimedAttempt | None, float]:
        """Claim the oldest ``starting`` attempt; return it and when the claim began."""
        deadlines = {name: cfg.timeout for name, cfg in self.provider_configs.items()}
        began = time.perf_counter()  # the claim's transaction is part of the overhead
        claimed = await self.store.claim_next_attempt(
            self.worker_id,
            lease_ttl=self.config.lease_ttl,
            deadline_s=deadlines,
            default_deadline_s=DEFAULT_DEADLINE,
        )
        return claimed, began

    async def _execute(
        self, claimed: ClaimedAttempt, began: float, prompt: _Prompt | None = None
    ) -> JobRecord | None:
        self._in_flight += 1
        self.metrics.attempts_in_flight.inc()
        try:
            return await self._run(claimed, began, prompt)
        finally:
            self._in_flight -= 1
            self.metrics.attempts_in_flight.dec()

    async def _run(
        self, claimed: ClaimedAttempt, started: float, prompt: _Prompt | None = None
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
            return await self._fail(
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
            return await self._fail(
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
            return await self._fail(
                job, attempt, {"reason": "render_failed", "message": str(exc)}, started, None
            )

        # The lease is renewed until the outcome is committed, not just until the call
        # returns: under load the deciding transaction may itself wait for a connection.
        renewal = _LeaseRenewal(self, attempt)
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
            asyncio.create_task(self._hedge(job, attempt, answered)) if target is not None else None
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
                return await self._fail(
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
            return await self._finalize(job, attempt, result, started, provider_s)
        if definite and error is not None:
            return await self._fail(job, attempt, error, started, provider_s)
        return await self._unknown(job, attempt, error or {}, started, provider_s)

    async def _finalize(
        self,
        job: JobRecord,
        attempt: AttemptRecord,
        result: ProviderResult,
        started: float,
        provider_s: float,
    ) -> JobRecord | None:
        ids = {"job_id": job.id, "attempt_id": attempt.id, "provider": attempt.provider}

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
            fin = await self._persist("decision", decide, exc)
        if fin.outcome is FinalizeOutcome.STALE:
            fin = await self._late_answer(attempt, result, fin, ids)
        if self.settings.shortcuts.write_batching:
            # Two loop turns for this process's waiters, woken by the decision, before the
            # bookkeeping below: one to answer, one for the edge to send what they wrote
            # (gateway.http.edge.OneWritePerTurn sends a turn's writes at its end).
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        await self._check_model(job, attempt, result, ids)
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
        return fin.job

    async def _persist(self, what: str, write: Callable[[], Awaitable[_T]], error: Exception) -> _T:
        """Try ``write`` again while the database is unavailable, up to ``decision_retry``.

        The provider has answered (or definitely failed, or timed out): what it did is in
        this process's memory only. A failover or a partition that fails the deciding
        statement would otherwise leave the attempt to its lease, and then ``unknown``
        for an operator. Each write is guarded by the attempt's state, so a try whose
        commit was lost with its answer is found done by the next one; an answer that
        outlived its lease resolves the attempt the reaper made ``unknown``
        (``_late_answer``). ``error`` is the first try's; anything but an unavailable
        database is raised at once.
        """
        pause = DECISION_RETRY_FIRST
        give_up = time.monotonic() + self.config.decision_retry
        while True:
            if not self.store.unavailable(error, what) or time.monotonic() + pause > give_up:
                raise error
            await asyncio.sleep(pause)
            pause = min(pause * 2, DECISION_RETRY_MAX)
            try:
                return await write()
            except Exception as exc:
                error = exc

    async def _late_answer(
        self,
        attempt: AttemptRecord,
        result: ProviderResult,
        fin: FinalizeResult,
        ids: dict[str, str],
    ) -> FinalizeResult:
        """Decide with an answer that came back after the attempt's lease expired.

        The reaper made the attempt ``unknown`` while its answer was on the way (the
        database was away longer than the lease, say). This process holds the evidence
        a reconciler would look for: the answer itself. So it resolves the attempt with
        it, through the same compare-and-swap (another attempt that won meanwhile still
        wins). An attempt moved any other way keeps its state, and the answer is dropped.
        """
        try:
            res = await self.store.resolve(
                attempt.id,
                AttemptState.SUCCEEDED,
                result=result.output,
                note="the provider answered after the lease expired",
                evidence={"source": "late_answer", "worker": self.worker_id},
            )
        except Exception as exc:
            if not self.store.unavailable(exc, "late answer"):
                raise
            return fin
        if res.outcome is not TransitionOutcome.DONE or res.job is None:
            return fin
        won = res.job.completed_by == attempt.id
        log.warning(
            "late answer resolved its unknown attempt",
            extra={**ids, "won": won, "winner": res.job.completed_by},
        )
        return FinalizeResult(
            FinalizeOutcome.WON if won else FinalizeOutcome.LOST,
            attempt.id,
            winner=res.job.completed_by,
            job_status=res.job.status,
            job=res.job,
        )

    async def _check_model(
        self,
        job: JobRecord,
        attempt: AttemptRecord,
        result: ProviderResult,
        ids: dict[str, str],
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
        log.warning(identity.reason, extra={**ids, "reported_model": result.model})
        detail = {"configured": cfg.model, "reported": result.model, "reason": identity.reason}
        try:
            await self.store.record_event(job.id, "model_mismatch", detail, attempt.id)
        except Exception:  # the decision is committed; a lost audit line is only logged
            log.exception("model mismatch could not be recorded", extra=ids)

    async def _fail(
        self,
        job: JobRecord,
        attempt: AttemptRecord,
        error: dict[str, Any],
        started: float,
        provider_s: float | None,
    ) -> JobRecord | None:
        ids = {"job_id": job.id, "attempt_id": attempt.id, "provider": attempt.provider}

        async def record() -> TransitionResult:
            fresh = await self.store.get_job(job.id)
            next_provider = self.routes.next_provider(fresh, attempt) if fresh is not None else None
            return await self.store.fail_attempt(attempt.id, error, next_provider=next_provider)

        try:
            res = await record()
        except Exception as exc:
            res = await self._persist("failure", record, exc)
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
        return res.job

    async def _unknown(
        self,
        job: JobRecord,
        attempt: AttemptRecord,
        error: dict[str, Any],
        started: float,
        provider_s: float,
    ) -> JobRecord | None:
        ids = {"job_id": job.id, "attempt_id": attempt.id, "provider": attempt.provider}

        def record() -> Awaitable[TransitionResult]:
            return self.store.mark_unknown(attempt.id, error)

        try:
            res = await record()
        except Exception as exc:
            res = await self._persist("unknown outcome", record, exc)
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
        return res.job

    # -- companions of a call in flight ----------------------------------------------------

    async def _hedge(self, job: JobRecord, attempt: AttemptRecord, done: asyncio.Event) -> None:
        """After ``hedge_after_s`` with the call still in flight, race it on the first fallback."""
        route = self.settings.route_for(job.contract)
        assert route is not None and route.hedge_after_s is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), route.hedge_after_s)
        if done.is_set() or self._stopping.is_set():
            return
        target = self.routes.hedge_target(job, attempt, self.catalog[job.contract])
        if target is None:
            return  # the certificate was withdrawn while we waited
        ids = {"job_id": job.id, "attempt_id": attempt.id}
        try:
            res = await self.store.add_attempt(
                job.id, target, AttemptReason.HEDGE, allow_running=True
            )
        except Exception:
            log.exception("hedge could not be added", extra=ids)
            return
        if res.outcome is AddAttemptOutcome.ADDED and res.attempt is not None:
            log.info(
                "hedge started",
                extra={**ids, "hedge_attempt_id": res.attempt.id, "hedge_provider": target},
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
                await self.store.release_unsent()
                await self.reap_once()
                await self.metrics.refresh(self.store)
            except Exception as exc:
                if not self.store.unavailable(exc, "reaper"):
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


class _Prompt:
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


class _LeaseRenewal:
    """Renew an attempt's lease every third of its TTL until ``stop``.

    A timer, not a task waiting on an event: most calls end before the first renewal is
    due, and then this costs one timer handle instead of two tasks per attempt. A renewal
    in flight when the outcome is committed is awaited by ``stop``; one that finds the
    lease lost stops renewing (the attempt's answer is then dropped as stale).
    """

    def __init__(self, dispatcher: Dispatcher, attempt: AttemptRecord) -> None:
        self._dispatcher = dispatcher
        self._attempt = attempt
        self._every = dispatcher.config.lease_ttl / 3
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(self._every, self._due)

    def _due(self) -> None:
        self._timer = None
        self._task = self._loop.create_task(self._renew())

    async def _renew(self) -> None:
        attempt, dispatcher = self._attempt, self._dispatcher
        ids = {"job_id": attempt.job_id, "attempt_id": attempt.id}
        try:
            held = await dispatcher.store.renew_lease(
                attempt.id, dispatcher.worker_id, lease_ttl=dispatcher.config.lease_ttl
            )
        except Exception as exc:
            if not dispatcher.store.unavailable(exc, "lease renewal"):
                log.exception("lease renewal failed", extra=ids)
            held = True  # try again at the next turn
        if not held:
            log.warning("lease lost while the call is in flight", extra=ids)
            return
        if not self._stopped:
            self._timer = self._loop.call_later(self._every, self._due)

    async def stop(self) -> None:
        """Renew no more; wait for a renewal in flight."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
