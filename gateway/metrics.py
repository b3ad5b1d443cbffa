"""Prometheus metrics of one gateway or worker process, on a registry of its own.

Never the global registry: tests build many apps in one process, and each must count alone.
"""

from __future__ import annotations

import enum

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from gateway.domain.ports import JobStore
from gateway.domain.states import AttemptState

#: Histogram buckets for attempt wall time (seconds): LLM calls take 0.1 s to a minute.
ATTEMPT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
#: Histogram buckets for the dispatcher's own overhead (seconds): database round trips.
OVERHEAD_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
#: The most unknown attempts counted at one refresh; the gauge saturates beyond it.
UNKNOWN_SCAN_LIMIT = 10_000
#: Age labels of unknown attempts (seconds since the attempt was created), ascending.
UNKNOWN_AGE_BOUNDS = ((60.0, "lt_1m"), (600.0, "lt_10m"), (3600.0, "lt_1h"), (86400.0, "lt_1d"))
UNKNOWN_AGE_OLDER = "ge_1d"


class ReconcileOutcome(enum.StrEnum):
    """What one reconciler check of an ``unknown`` attempt came to."""

    #: Found a stored answer that kept the contract; it won the compare-and-swap.
    SUCCEEDED = "succeeded"
    #: Found a valid answer, but the job had been decided: the attempt is ``lost``.
    LOST = "lost"
    #: Found an answer that breaks the contract: the attempt failed (definite).
    CONTRACT_VIOLATION = "contract_violation"
    #: The provider holds nothing under the key: the attempt stays ``unknown``.
    NOT_FOUND = "not_found"
    #: The provider could not be asked: the attempt stays ``unknown``.
    LOOKUP_FAILED = "lookup_failed"
    #: Someone else (an operator, another reconciler) resolved it first.
    ALREADY_RESOLVED = "already_resolved"


class AttemptOutcome(enum.StrEnum):
    """How one attempt ended, as far as this process saw it."""

    #: Won the compare-and-swap: its result is the job's result.
    SUCCEEDED = "succeeded"
    #: Finished after another attempt (or a cancel) had decided the job.
    LOST = "lost"
    #: Definite failure (the provider did not do the work, or broke the contract).
    FAILED = "failed"
    #: Timed out, connection broke, ambiguous status, or its lease expired.
    UNKNOWN = "unknown"
    #: Finished, but the attempt had already been moved (e.g. reaped) before it could.
    STALE = "stale"


class Metrics:
    """Counters, gauges and histograms the app and the dispatcher update."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.jobs_created = Counter("onejob_jobs_created", "Jobs created.", registry=r)
        self.jobs_replayed = Counter(
            "onejob_jobs_replayed",
            "Creations answered with an existing job (same key).",
            registry=r,
        )
        self.jobs_conflicted = Counter(
            "onejob_jobs_conflicted",
            "Creations refused: key reused with another request.",
            registry=r,
        )
        self.attempts = Counter(
            "onejob_attempts",
            "Attempts finished, by provider and outcome.",
            ["provider", "outcome"],
            registry=r,
        )
        self.model_mismatches = Counter(
            "onejob_provider_model_mismatches",
            "Answers whose reported model is not the configured one (nor its snapshot or alias).",
            ["provider"],
            registry=r,
        )
        self.races_lost = Counter(
            "onejob_races_lost", "Attempts that finished after the job was decided.", registry=r
        )
        self.attempts_unknown = Gauge(
            "onejob_attempts_unknown", "Attempts awaiting out-of-band resolution.", registry=r
        )
        self.attempts_unknown_by_age = Gauge(
            "onejob_attempts_unknown_by_age",
            "Unknown attempts by provider and age since creation (lt_1m ... ge_1d).",
            ["provider", "age"],
            registry=r,
        )
        self.reconciled = Counter(
            "onejob_reconciled_attempts",
            "Unknown attempts the reconciler checked, by provider and outcome.",
            ["provider", "outcome"],
            registry=r,
        )
        self.attempts_in_flight = Gauge(
            "onejob_attempts_in_flight", "Attempts this process is running now.", registry=r
        )
        self.attempt_seconds = Histogram(
            "onejob_attempt_seconds",
            "Wall time of an attempt: claim transaction to decision committed.",
            ["provider"],
            buckets=ATTEMPT_BUCKETS,
            registry=r,
        )
        self.provider_seconds = Histogram(
            "onejob_provider_call_seconds",
            "Time spent inside the provider call.",
            ["provider"],
            buckets=ATTEMPT_BUCKETS,
            registry=r,
        )
        self.overhead_seconds = Histogram(
            "onejob_dispatch_overhead_seconds",
            "Attempt wall time minus provider time: claim, bookkeeping and the CAS.",
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        self.queue_seconds = Histogram(
            "onejob_attempt_queue_seconds",
            "From attempt creation until a runner claimed it.",
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )

    def job_created(self) -> None:
        """Count a new job."""
        self.jobs_created.inc()

    def job_replayed(self) -> None:
        """Count a creation answered by replay."""
        self.jobs_replayed.inc()

    def job_conflicted(self) -> None:
        """Count a creation refused as a key conflict."""
        self.jobs_conflicted.inc()

    def attempt_finished(
        self,
        provider: str,
        outcome: AttemptOutcome,
        *,
        wall_s: float | None = None,
        provider_s: float | None = None,
    ) -> None:
        """Count a finished attempt and observe its timings (seconds)."""
        self.attempts.labels(provider=provider, outcome=outcome.value).inc()
        if outcome is AttemptOutcome.LOST:
            self.races_lost.inc()
        if wall_s is not None:
            self.attempt_seconds.labels(provider=provider).observe(wall_s)
        if provider_s is not None:
            self.provider_seconds.labels(provider=provider).observe(provider_s)
        if wall_s is not None and provider_s is not None:
            self.overhead_seconds.observe(max(wall_s - provider_s, 0.0))

    def attempt_reconciled(self, provider: str, outcome: ReconcileOutcome) -> None:
        """Count one reconciler check of an unknown attempt."""
        self.reconciled.labels(provider=provider, outcome=outcome.value).inc()

    async def refresh(self, store: JobStore) -> None:
        """Set the unknown-attempts gauges from the database (all processes' attempts)."""
        by_age = getattr(store, "unknown_by_provider_and_age", None)
        if by_age is not None:
            counts = await by_age(UNKNOWN_AGE_BOUNDS, UNKNOWN_AGE_OLDER)
            self.attempts_unknown_by_age.clear()  # a bucket that emptied must not stay stale
            for (provider, age), n in counts.items():
                self.attempts_unknown_by_age.labels(provider=provider, age=age).set(n)
        count = getattr(store, "count_attempts", None)  # a COUNT(*) where the store offers one
        if count is not None:
            self.attempts_unknown.set(int(await count(AttemptState.UNKNOWN)))
            return
        unknown = await store.list_attempts(AttemptState.UNKNOWN, limit=UNKNOWN_SCAN_LIMIT)
        self.attempts_unknown.set(len(unknown))

    def render(self) -> tuple[bytes, str]:
        """Return the exposition body and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
