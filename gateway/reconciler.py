"""The reconciler: ask providers about ``unknown`` attempts and decide by evidence (R3).

A pass reads the ``unknown`` attempts of providers configured with ``reconcile = true``
whose deadline passed at least ``grace`` seconds ago, and asks each provider what it stored
under the attempt's downstream key (``providers.lookup``). What each answer proves, and
what follows:

- **found, and the answer keeps the contract**: the provider did the work. The answer goes
  through the same compare-and-swap as any attempt (``resolve(..., SUCCEEDED)``): it wins,
  or it is ``lost`` to a decision already made. Never a second winner.
- **found, and the answer breaks the contract** (schema, or a refusal/truncation stored as
  the answer): a definite failure; the attempt fails with ``contract_violation`` and fails
  over only to a certified fallback (``Routes.failover``), as the dispatcher would, and
  says on the job which fallbacks it passed over (``failover_skipped``).
- **not found**: nothing is proved (storing may lag or be off, the store may be purged);
  the attempt stays ``unknown`` and the finding is kept for the operator.
- **lookup failed**: nothing is learned; the attempt stays ``unknown``.

Every decision carries its evidence (the provider's completion id, when it was looked up)
into the ``attempt_resolved`` audit event and the attempt's ``reconciler`` column. Several
reconcilers (one per process) and operators may race on one attempt: ``resolve`` moves only
an ``unknown`` attempt, in one transaction, so exactly one of them decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import logging
from collections.abc import Callable, Mapping
from typing import Any

from gateway.dispatch.calling import output_violations
from gateway.dispatch.routing import Routes, record_skipped
from gateway.domain.clock import SystemClock, aware
from gateway.domain.ports import Clock, ContractSpec, JobStore, Reconcilable
from gateway.domain.records import AttemptRecord, TransitionOutcome, TransitionResult
from gateway.domain.states import AttemptState, JobStatus
from gateway.metrics import Metrics, ReconcileOutcome
from gateway.settings import Settings
from gateway.tracing import NO_TRACING, Tracing
from providers.base import ProviderError
from providers.lookup import StoredAnswer

log = logging.getLogger(__name__)

SCAN_LIMIT = 1000  # unknown attempts read per pass, before filtering by provider and grace
MESSAGE_CHARS = 300  # characters of a lookup error kept in a finding
#: What a finding that decides nothing says it proves, for the operator reading it.
PROVES = {
    ReconcileOutcome.NOT_FOUND: "nothing: the provider holds no answer under this key now; "
    "absence is not proof that the work was not done",
    ReconcileOutcome.LOOKUP_FAILED: "nothing: the provider could not be asked",
}


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    """One unknown attempt asked about, and what came of it."""

    attempt: AttemptRecord
    outcome: ReconcileOutcome
    finding: dict[str, Any]  #: what was recorded (the evidence, for a decision)


@dataclasses.dataclass(frozen=True, slots=True)
class PassSummary:
    """What one pass did."""

    checks: tuple[Check, ...]

    def counts(self) -> dict[str, int]:
        """Count the checks by outcome."""
        counts: dict[str, int] = {}
        for check in self.checks:
            counts[check.outcome.value] = counts.get(check.outcome.value, 0) + 1
        return counts


def _iso(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


#: A job's statuses after which its span is emitted (``Tracing.job_settled``).
_SETTLED = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


class Reconciler:
    """Ask reconcilable providers about ``unknown`` attempts: one pass, or periodically."""

    def __init__(
        self,
        *,
        store: JobStore,
        lookups: Mapping[str, Reconcilable],
        catalog: Mapping[str, ContractSpec],
        routes: Routes,
        settings: Settings,
        metrics: Metrics,
        clock: Clock | None = None,
        tracing: Tracing = NO_TRACING,
    ) -> None:
        self.store = store
        self.tracing = tracing
        self.catalog = catalog
        self.routes = routes
        self.config = settings.reconciler
        self.metrics = metrics
        self.clock: Clock = clock or SystemClock()
        #: The providers that may be asked: configured to reconcile, and able to (the
        #: composition root decides which: ``bootstrap.build_reconciler``).
        self.lookups: dict[str, Reconcilable] = dict(lookups)
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def active(self) -> bool:
        """Say whether any provider can be asked (otherwise a pass does nothing)."""
        return bool(self.lookups)

    # -- one pass --------------------------------------------------------------------------

    async def due(self, *, grace: float | None = None) -> list[AttemptRecord]:
        """Return the unknown attempts to ask about now: reconcilable, past their grace."""
        grace = self.config.grace if grace is None else grace
        now = self.clock.now()
        unknown = await self.store.list_attempts(AttemptState.UNKNOWN, limit=SCAN_LIMIT)
        due = [
            a
            for a in unknown
            if a.provider in self.lookups
            and (now - aware(a.deadline_at or a.created_at)).total_seconds() >= grace
        ]
        return due[: self.config.batch]

    async def run_once(
        self,
        *,
        grace: float | None = None,
        progress: Callable[[Check], None] | None = None,
    ) -> PassSummary:
        """Ask about every due attempt once; return what was found."""
        checks: list[Check] = []
        for attempt in await self.due(grace=grace):
            if self._stopping.is_set():
                break
            check = await self.check(attempt)
            checks.append(check)
            if progress is not None:
                progress(check)
        return PassSummary(tuple(checks))

    async def check(self, attempt: AttemptRecord) -> Check:
        """Ask the attempt's provider, then decide or record the finding (traced: a child
        of the job's span, in the caller's trace)."""
        if not self.tracing.enabled:
            return await self._check(attempt)
        job = await self.store.get_job(attempt.job_id)
        if job is None:
            return await self._check(attempt)
        with self.tracing.job_step(
            job,
            "onejob.reconcile",
            **{"attempt.id": attempt.id, "attempt.number": attempt.number},
            provider=attempt.provider,
        ):
            check = await self._check(attempt)
            self.tracing.note(**{"reconcile.outcome": check.outcome.value})
        if check.outcome is ReconcileOutcome.ALREADY_RESOLVED:
            return check
        settled = await self.store.get_job(attempt.job_id)
        if settled is not None and settled.status in _SETTLED:
            self.tracing.job_settled(settled, decided_by="reconciler")
        return check

    async def _check(self, attempt: AttemptRecord) -> Check:
        looked_up_at = self.clock.now()
        base: dict[str, Any] = {
            "last_checked_at": _iso(looked_up_at),
            "provider": attempt.provider,
            "downstream_key": attempt.downstream_key,
        }
        provider = self.lookups.get(attempt.provider)
        if provider is None:
            return await self._note(attempt, ReconcileOutcome.LOOKUP_FAILED, base, "no lookup")
        try:
            timeout = self.config.lookup_timeout
            found = await provider.lookup(attempt.downstream_key, timeout=timeout)
        except ProviderError as exc:
            return await self._note(attempt, ReconcileOutcome.LOOKUP_FAILED, base, str(exc))
        except Exception as exc:  # a bug below us must not stop the pass
            log.exception("lookup raised unexpectedly", extra=self._ids(attempt))
            message = f"{type(exc).__name__}: {exc}"
            return await self._note(attempt, ReconcileOutcome.LOOKUP_FAILED, base, message)
        if found is None:
            return await self._note(attempt, ReconcileOutcome.NOT_FOUND, base)
        return await self._decide(attempt, found, base)

    async def _note(
        self,
        attempt: AttemptRecord,
        outcome: ReconcileOutcome,
        base: dict[str, Any],
        message: str | None = None,
    ) -> Check:
        """Record a finding that decides nothing; the attempt stays ``unknown``."""
        finding = {**base, "finding": outcome.value, "proves": PROVES.get(outcome, "")}
        if message is not None:
            finding["message"] = message[:MESSAGE_CHARS]
        still_unknown = await self.store.record_finding(attempt.id, finding)
        if not still_unknown:
            outcome = ReconcileOutcome.ALREADY_RESOLVED
        self._count(attempt, outcome, finding)
        return Check(attempt, outcome, finding)

    async def _decide(
        self, attempt: AttemptRecord, found: StoredAnswer, base: dict[str, Any]
    ) -> Check:
        """Put a stored answer through the contract check and the compare-and-swap."""
        evidence: dict[str, Any] = {
            **base,
            "completion_id": found.completion_id,
            "completion_created": (
                _iso(dt.datetime.fromtimestamp(found.created, dt.UTC))
                if found.created is not None
                else None
            ),
            "matches": found.matches,
        }
        job = await self.store.get_job(attempt.job_id)
        contract = self.catalog.get(job.contract) if job is not None else None
        if job is None or contract is None:
            message = "found an answer, but the job's contract is not in this process's catalog"
            return await self._note(attempt, ReconcileOutcome.LOOKUP_FAILED, evidence, message)
        if found.failure is not None:
            violations = [str(found.failure)]
            evidence["cause"] = found.failure.reason
        else:
            assert found.result is not None
            violations = output_violations(contract, found.result.output)
        if violations:
            evidence.update(finding=ReconcileOutcome.CONTRACT_VIOLATION.value, errors=violations)
            error = {
                "outcome": "definite",
                "reason": "contract_violation",
                "errors": violations,
                "request_id": found.completion_id,
            }
            next_provider, skipped = self.routes.failover(job, attempt)
            res = await self.store.resolve(
                attempt.id,
                AttemptState.FAILED,
                note="reconciler: the provider's stored answer breaks the contract",
                next_provider=next_provider,
                evidence=evidence,
                error=error,
            )
            outcome = (
                ReconcileOutcome.CONTRACT_VIOLATION
                if res.outcome is TransitionOutcome.DONE
                else ReconcileOutcome.ALREADY_RESOLVED
            )
            if res.outcome is TransitionOutcome.DONE:
                await record_skipped(self.store, job, attempt.id, skipped)
        else:
            assert found.result is not None
            evidence["finding"] = "found"
            res = await self.store.resolve(
                attempt.id,
                AttemptState.SUCCEEDED,
                result=found.result.output,
                note=f"reconciler: the provider stored completion {found.completion_id}",
                evidence=evidence,
            )
            outcome = self._success_outcome(res)
        self._count(attempt, outcome, evidence)
        return Check(attempt, outcome, evidence)

    @staticmethod
    def _success_outcome(res: TransitionResult) -> ReconcileOutcome:
        if res.outcome is not TransitionOutcome.DONE or res.attempt is None:
            return ReconcileOutcome.ALREADY_RESOLVED
        if res.attempt.state is AttemptState.SUCCEEDED:
            return ReconcileOutcome.SUCCEEDED
        return ReconcileOutcome.LOST

    def _count(self, attempt: AttemptRecord, outcome: ReconcileOutcome, finding: Any) -> None:
        self.metrics.attempt_reconciled(attempt.provider, outcome)
        level = logging.INFO if outcome is not ReconcileOutcome.LOOKUP_FAILED else logging.WARNING
        log.log(
            level,
            "reconciler checked an unknown attempt",
            extra={
                **self._ids(attempt),
                "outcome": outcome.value,
                "completion_id": finding.get("completion_id"),
            },
        )

    @staticmethod
    def _ids(attempt: AttemptRecord) -> dict[str, str]:
        return {"job_id": attempt.job_id, "attempt_id": attempt.id, "provider": attempt.provider}

    # -- periodic --------------------------------------------------------------------------

    async def start(self) -> None:
        """Run a pass every ``interval`` seconds until ``stop``."""
        if self._task is None:
            self._stopping.clear()
            self._task = asyncio.create_task(self._loop(), name="onejob-reconciler")
            log.info(
                "reconciler started",
                extra={"providers": sorted(self.lookups), "interval": self.config.interval},
            )

    async def stop(self) -> None:
        """Stop after the check in progress."""
        self._stopping.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.run_once()
            except Exception:
                log.exception("reconciler pass failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.config.interval)
