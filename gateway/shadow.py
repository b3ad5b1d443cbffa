"""Shadow checks (issue 38): agreement of certified fallbacks on production traffic.

A certificate proves a fallback answers the catalog's cases (and their variants) as the
primary does; failover then sends it everything else. The shadow checker re-runs a sample
of real succeeded jobs on each certified fallback, off the hot path, and compares:

- which jobs: succeeded jobs of hedgeable contracts (free of side effects, so a second
  call is harmless) whose primary wrote the result, each (job, fallback) sampled at
  ``[shadow] sample_rate`` by a hash of both (every process samples the same jobs);
- the call: the fallback's adapter, with the check's own downstream key
  (``shadow-<check id>``), never the job's; the job gets no attempt and no event, its
  row is never written (``gateway.store.shadow`` keeps the check apart);
- how many: ``calls_per_hour`` over every process (counted in the database) and a
  ``min_interval`` between a process's calls (``gateway.domain.shadow.CallBudget``);
- the verdict: the fallback's answer through the checks that need no expected value, as
  the dispatcher runs them on every answer (schema, the pydantic model) plus the
  contract's invariants (assertions that read no ``expect``: sums, the input's order id;
  not the language detector), then its must-agree fields against the primary's actual
  result. What is kept is field names and value hashes, never values.

After each judged check the pair's newest ``window`` checks since the fallback's
certificate are tallied; at ``threshold`` or above, with ``min_samples`` judged, the pair
is suspended in the certification registry (``contracts.suspensions``): ``can_failover``
refuses it from then on, in every process reading the file, until the fallback is
certified again. The suspension is the audit record (who, when, the counts, the fields),
with a WARNING log line and ``onejob_failover_suspensions``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from gateway.certification_metrics import CertificationMetrics
from gateway.dispatch.calling import call_provider, output_violations
from gateway.dispatch.log_context import logged_as
from gateway.dispatch.routing import Routes
from gateway.domain.clock import SystemClock
from gateway.domain.ports import (
    Clock,
    ContractSpec,
    FailoverSuspensions,
    Provider,
    ShadowStore,
)
from gateway.domain.shadow import HOUR, CallBudget, judge, sampled, value_hash
from gateway.domain.shadow_records import ShadowCandidate, ShadowOutcome, ShadowTally
from gateway.settings import Settings, ShadowConfig
from gateway.tracing import NO_TRACING, Tracing
from providers.config import ProviderConfig

log = logging.getLogger("onejob.shadow")

SUSPENSION_REASON = "shadow checks disagree"


@dataclasses.dataclass(frozen=True, slots=True)
class ShadowResult:
    """One check made: the pair, the job, and what came of it."""

    job_id: str
    contract: str
    primary: str
    fallback: str
    outcome: ShadowOutcome
    detail: dict[str, Any]


def invariant_errors(contract: ContractSpec, input: Any, output: Any) -> list[str]:
    """Name the contract's assertions that need no expected value and fail on ``output``."""
    failed: list[str] = []
    for assertion in getattr(contract, "assertions", ()):
        if assertion.expect is not None or assertion.kind == "language":
            continue  # needs the case's answer, or the language detector (2 s, 300 MB)
        if assertion.evaluate(input, output, {}) is not None:
            failed.append(f"invariant:{assertion.id}")
    return failed


def compare(contract: ContractSpec, candidate: ShadowCandidate, output: Any) -> dict[str, Any]:
    """Judge a fallback's answer against the contract and the primary's result (redacted)."""
    fields = [f"contract:{v.split(':', 1)[0]}" for v in output_violations(contract, output)]
    if not fields:
        fields += invariant_errors(contract, candidate.input, output)
    primary = candidate.result if isinstance(candidate.result, dict) else {}
    answer = output if isinstance(output, dict) else {}
    hashes: dict[str, list[str]] = {}
    for name in getattr(contract, "must_agree", ()):
        if primary.get(name) != answer.get(name):
            fields.append(name)
            hashes[name] = [value_hash(primary.get(name)), value_hash(answer.get(name))]
    return {"fields": fields, "hashes": hashes, "input_sha256": value_hash(candidate.input)}


def certified_since(registry: FailoverSuspensions, contract: str, fallback: str) -> dt.datetime:
    """Return when the fallback's newest certificate was issued (the tally's start)."""
    cert = registry.latest_certificate(contract, fallback) or {}
    text = str(cert.get("certified_at") or "1970-01-01T00:00:00Z")
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


class ShadowChecker:
    """Re-run sampled succeeded jobs on certified fallbacks: one pass, or periodically."""

    def __init__(
        self,
        *,
        store: ShadowStore,
        providers: Mapping[str, Provider],
        provider_configs: Mapping[str, ProviderConfig],
        catalog: Mapping[str, ContractSpec],
        routes: Routes,
        registry: FailoverSuspensions,
        settings: Settings,
        metrics: CertificationMetrics,
        clock: Clock | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        tracing: Tracing = NO_TRACING,
    ) -> None:
        self.store = store
        self.tracing = tracing
        self.providers = providers
        self.provider_configs = provider_configs
        self.catalog = catalog
        self.routes = routes
        self.registry = registry
        self.config: ShadowConfig = settings.shadow
        self.instance_id = settings.instance_id
        self.metrics = metrics
        self.clock: Clock = clock or SystemClock()
        self.budget = CallBudget(
            self.clock, per_hour=self.config.calls_per_hour, min_interval=self.config.min_interval
        )
        self._sleep = sleep or self._interruptible_sleep
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._cursor = (self.clock.now() - dt.timedelta(seconds=self.config.lookback), "")
        self.hedgeable = sorted(n for n, c in catalog.items() if c.hedgeable)
        self.metrics.shadow_calls_limit.set(self.config.calls_per_hour if self.active else 0)

    @property
    def active(self) -> bool:
        """Say whether a pass can do anything: a sample, a budget, a hedgeable contract."""
        return (
            self.config.sample_rate > 0 and self.config.calls_per_hour > 0 and bool(self.hedgeable)
        )

    async def run_once(self) -> list[ShadowResult]:
        """Check the sampled jobs that succeeded since the last pass, within the budget."""
        now = self.clock.now()
        floor = (now - dt.timedelta(seconds=self.config.lookback), "")
        self._cursor = max(self._cursor, floor)
        candidates = await self.store.shadow_candidates(
            self._cursor, self.hedgeable, limit=self.config.batch
        )
        results: list[ShadowResult] = []
        for candidate in candidates:
            for fallback in self.routes.effective_fallbacks(candidate.contract, candidate.primary):
                if not sampled(candidate.job_id, fallback, self.config.sample_rate):
                    continue
                if self._stopping.is_set() or not await self._may_call():
                    return results  # the cursor stays: the next pass resumes here
                result = await self.check(candidate, fallback)
                if result is not None:
                    results.append(result)
            self._cursor = (candidate.finished_at, candidate.job_id)
        return results

    async def _may_call(self) -> bool:
        """Wait for the rate limit; say whether the hour's budget allows one more call."""
        since = self.clock.now() - dt.timedelta(seconds=HOUR)
        recent = await self.store.shadow_calls_since(since)
        self.metrics.shadow_calls_last_hour.set(recent)
        if self.budget.exhausted(recent):
            log.info("shadow call budget spent", extra={"calls_last_hour": recent})
            return False
        delay = self.budget.wait()
        if delay > 0:
            await self._sleep(delay)
        return not self._stopping.is_set()

    async def check(self, candidate: ShadowCandidate, fallback: str) -> ShadowResult | None:
        """Re-run one job on ``fallback`` and judge the answer; None when not ours to run."""
        contract = self.catalog.get(candidate.contract)
        provider = self.providers.get(fallback)
        cfg = self.provider_configs.get(fallback)
        if contract is None or provider is None or cfg is None:
            return None
        claimed = await self.store.begin_shadow_check(
            candidate.job_id, candidate.contract, candidate.primary, fallback
        )
        if claimed is None:
            return None  # another process (or an earlier pass) checks it
        check_id, key = claimed
        ids = {"job_id": candidate.job_id, "shadow_check": check_id, "provider": fallback}
        outcome, detail = await self._call(contract, candidate, provider, cfg, key, ids)
        await self.store.finish_shadow_check(check_id, outcome, detail)
        pair = (candidate.contract, candidate.primary, fallback)
        self.metrics.shadow_checks.labels(*pair, outcome.value).inc()
        log.info(
            "shadow check", extra={**ids, "outcome": outcome.value, "fields": detail["fields"]}
        )
        if outcome is not ShadowOutcome.ERROR:
            await self.judge_pair(*pair)
        return ShadowResult(candidate.job_id, *pair, outcome, detail)

    async def _call(
        self,
        contract: ContractSpec,
        candidate: ShadowCandidate,
        provider: Provider,
        cfg: ProviderConfig,
        key: str,
        ids: dict[str, str],
    ) -> tuple[ShadowOutcome, dict[str, Any]]:
        try:
            request = contract.provider_request(
                candidate.input, model=cfg.model, timeout=cfg.timeout, idempotency_key=key
            )
        except Exception as exc:  # nothing was sent
            return ShadowOutcome.ERROR, {"fields": [], "error": f"render: {type(exc).__name__}"}
        self.budget.took()
        self.metrics.shadow_calls.labels(cfg.name).inc()
        with (
            logged_as(ids),
            self.tracing.run("onejob.shadow_check", shadow=True, **{"job.id": candidate.job_id}),
        ):
            span = self.tracing.provider_call(
                cfg.protocol,
                request,
                shadow=True,
                provider=cfg.name,
                **{"job.id": candidate.job_id},
            )
            called = await call_provider(provider, span.outgoing(request, None, None), cfg.timeout)
            span.ended(called.result, called.error, unknown=not called.definite)
        if called.result is None:
            reason = (called.error or {}).get("reason", "error")
            return ShadowOutcome.ERROR, {"fields": [], "error": str(reason)}
        detail = compare(contract, candidate, called.result.output)
        outcome = ShadowOutcome.DISAGREED if detail["fields"] else ShadowOutcome.AGREED
        return outcome, detail

    async def judge_pair(self, contract: str, primary: str, fallback: str) -> ShadowTally:
        """Tally the pair since the fallback's certificate; suspend it past the threshold."""
        since = certified_since(self.registry, contract, fallback)
        tally = await self.store.shadow_tally(
            contract, primary, fallback, since=since, window=self.config.window
        )
        labels = (contract, primary, fallback)
        self.metrics.judged.labels(*labels).set(tally.checks)
        if tally.rate is not None:
            self.metrics.disagreement_rate.labels(*labels).set(tally.rate)
        verdict = judge(tally, threshold=self.config.threshold, min_samples=self.config.min_samples)
        if verdict.suspend:
            await self._suspend(contract, primary, fallback, tally, since)
        return tally

    async def _suspend(
        self, contract: str, primary: str, fallback: str, tally: ShadowTally, since: dt.datetime
    ) -> None:
        cert = self.registry.latest_certificate(contract, fallback) or {}
        record = {
            "contract": contract,
            "primary": primary,
            "fallback": fallback,
            "since": _iso(self.clock.now()),
            "reason": SUSPENSION_REASON,
            "disagreement_rate": round(tally.rate or 0.0, 4),
            "checks": tally.checks,
            "disagreements": tally.disagreements,
            "threshold": self.config.threshold,
            "min_samples": self.config.min_samples,
            "fields": tally.fields,
            "fallback_run_id": str(cert.get("run_id") or "unknown"),
            "fallback_certified_at": _iso(since),
            "by": self.instance_id,
            "cleared_at": None,
            "cleared_by": None,
        }
        try:
            new = await asyncio.to_thread(self.registry.suspend, record)
        except Exception:
            log.exception("could not record a failover suspension", extra=record)
            return
        self.metrics.suspended.labels(contract, primary, fallback).set(1)
        if new:
            self.metrics.suspensions.labels(contract, primary, fallback).inc()
            log.warning("failover suspended: shadow checks disagree", extra=record)

    # -- periodic --------------------------------------------------------------------------

    async def start(self) -> None:
        """Run a pass every ``interval`` seconds until ``stop``."""
        if self._task is None:
            self._stopping.clear()
            self._task = asyncio.create_task(self._loop(), name="onejob-shadow")
            log.info(
                "shadow checks started",
                extra={
                    "sample_rate": self.config.sample_rate,
                    "calls_per_hour": self.config.calls_per_hour,
                    "contracts": self.hedgeable,
                },
            )

    async def stop(self) -> None:
        """Stop after the check in progress."""
        self._stopping.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _interruptible_sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.run_once()
            except Exception as exc:
                unavailable = getattr(self.store, "unavailable", None)
                if unavailable is None or not unavailable(exc, "shadow checks"):
                    log.exception("shadow pass failed")
            await self._interruptible_sleep(self.config.interval)


def _iso(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
