"""Metrics of providers' capacity (issue 43): waits, circuits, pacing, the queue, refusals.

Part of ``gateway.metrics.Metrics`` (``metrics.capacity``), on its registry. The queue's
gauges are read from the database (every process sees it whole: ``mostrecent``); a
circuit's state is the worst any live process sees (``max``); a process's pace is its
slice of the provider's limit, so their sum over processes is the pace of the whole
cluster (``livesum``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gateway.capacity.gate import ProviderState

#: ``onejob_provider_circuit_state``'s values.
CIRCUIT_VALUES = {"closed": 0, "half_open": 1, "open": 2}
#: Seconds from a job's creation to its first call (waiting for capacity included).
START_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0)


class CapacityMetrics:
    """What providers' capacity does to the jobs."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.waits = Counter(
            "onejob_provider_waits",
            "Times an attempt could not go to its provider, by reason (rate_limited, "
            "overloaded: the provider said so; paced, paused, circuit_open, concurrency: "
            "not sent).",
            ["provider", "reason"],
            registry=r,
        )
        self.attempts_queued = Gauge(
            "onejob_attempts_queued",
            "Unsent attempts by provider and state (starting: in line; waiting: for capacity).",
            ["provider", "state"],
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.circuit = Gauge(
            "onejob_provider_circuit_state",
            "A provider's circuit: 0 closed, 1 half open (a probe is out), 2 open.",
            ["provider"],
            registry=r,
            multiprocess_mode="max",
        )
        self.pace = Gauge(
            "onejob_provider_pace_requests_per_minute",
            "The request rate a provider is paced at (summed over processes: each paces "
            "its slice); absent while no limit is known.",
            ["provider"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.start_seconds = Histogram(
            "onejob_job_start_seconds",
            "From a job's creation to its first attempt's call, waits for capacity included.",
            buckets=START_BUCKETS,
            registry=r,
        )
        self.refusals = Counter(
            "onejob_jobs_refused",
            "Creations refused before anything was written, by reason (queue_full).",
            ["reason"],
            registry=r,
        )
        self.expirations = Counter(
            "onejob_jobs_expired",
            "Jobs whose deadline passed while they waited unsent (job_deadline).",
            registry=r,
        )
        self._queued_shown: set[tuple[str, str]] = set()

    def waited(self, provider: str, reason: str) -> None:
        """Count one time an attempt could not go to ``provider``."""
        self.waits.labels(provider=provider, reason=reason).inc()

    def refused(self, reason: str) -> None:
        """Count one creation refused before anything was written."""
        self.refusals.labels(reason=reason).inc()

    def expired(self) -> None:
        """Count one job whose deadline passed while it waited."""
        self.expirations.inc()

    def started(self, seconds: float) -> None:
        """Observe the time from a job's creation to its first call."""
        self.start_seconds.observe(max(seconds, 0.0))

    def show(self, states: Iterable[ProviderState]) -> None:
        """Set each provider's circuit and pace as this process sees them."""
        for state in states:
            self.circuit.labels(provider=state.provider).set(CIRCUIT_VALUES[state.circuit])
            if state.requests_per_minute is not None:
                self.pace.labels(provider=state.provider).set(state.requests_per_minute)

    def show_queue(self, depth: Mapping[str, Mapping[str, int]]) -> None:
        """Set the queue's gauges from a count of it (``JobStore.queue_depth``)."""
        shown = set()
        for provider, states in depth.items():
            for state, count in states.items():
                self.attempts_queued.labels(provider=provider, state=state).set(count)
                shown.add((provider, state))
        for provider, state in self._queued_shown - shown:  # emptied since: 0, not gone
            self.attempts_queued.labels(provider=provider, state=state).set(0)
        self._queued_shown = shown
