"""Prometheus metrics of one gateway or worker process, on a registry of its own.

Never the global registry: tests build many apps in one process, and each must count alone.

Several server processes on one socket (``onejob serve --workers N``) share their counts
through prometheus_client's multiprocess mode: the supervisor points
``PROMETHEUS_MULTIPROC_DIR`` at a fresh directory before it starts the workers, each
worker's values live in files there, and whichever worker a scrape reaches renders the sum
of all of them. prometheus_client picks its value class from that variable at import, so
the mode is per process: on, or off for the whole process.
"""

from __future__ import annotations

import datetime as dt
import enum
import glob
import os
import re
from collections.abc import Iterable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    values,
)
from prometheus_client.metrics_core import Metric

from gateway.capacity_metrics import CapacityMetrics
from gateway.certification_metrics import CertificationMetrics
from gateway.domain.ports import JobStore
from gateway.domain.states import AttemptState
from gateway.notify import RelayState
from gateway.webhooks.metrics import WebhookMetrics

#: Histogram buckets for attempt wall time (seconds): LLM calls take 0.1 s to a minute.
ATTEMPT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
#: Histogram buckets for the dispatcher's own overhead (seconds): database round trips.
OVERHEAD_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
#: The most unknown attempts counted at one refresh; the gauge saturates beyond it.
UNKNOWN_SCAN_LIMIT = 10_000
#: Age labels of unknown attempts (seconds since the attempt was created), ascending.
UNKNOWN_AGE_BOUNDS = ((60.0, "lt_1m"), (600.0, "lt_10m"), (3600.0, "lt_1h"), (86400.0, "lt_1d"))
UNKNOWN_AGE_OLDER = "ge_1d"
#: The directory of the multiprocess mode's files (prometheus_client's own variable).
MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: A live gauge's file: ``gauge_livesum_<pid>.db`` and the like, dropped when <pid> ends.
_LIVE_GAUGE_FILE = re.compile(r"gauge_live[a-z]+_(\d+)\.db$")


def multiprocess_dir() -> str | None:
    """Return the directory this process shares its values through, or None (mode off)."""
    if values.ValueClass is values.MutexValue:  # chosen at import: the variable was unset
        return None
    return os.environ.get(MULTIPROC_DIR_ENV)


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
        # Read from the database, which every process sees whole: the latest refresh wins.
        self.attempts_unknown = Gauge(
            "onejob_attempts_unknown",
            "Attempts awaiting out-of-band resolution.",
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.attempts_unknown_by_age = Gauge(
            "onejob_attempts_unknown_by_age",
            "Unknown attempts by provider and age since creation (lt_1m ... ge_1d).",
            ["provider", "age"],
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.reconciled = Counter(
            "onejob_reconciled_attempts",
            "Unknown attempts the reconciler checked, by provider and outcome.",
            ["provider", "outcome"],
            registry=r,
        )
        self.attempts_in_flight = Gauge(
            "onejob_attempts_in_flight",
            "Attempts running now (summed over the live server processes).",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.listen_connected = Gauge(
            "onejob_listen_connected",
            "Server processes whose LISTEN relay is connected (cross-process wake-ups).",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.listen_reconnects = Counter(
            "onejob_listen_reconnects",
            "Times a LISTEN relay connected again after losing its connection.",
            registry=r,
        )
        self._relay: RelayState | None = None
        self._reconnects_shown = 0
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
        #: Shadow checks, suspensions and certificates' expiry (issue 38).
        self.certification = CertificationMetrics(r)
        #: Waits for capacity, circuits, pacing, the queue, refusals (issue 43).
        self.capacity = CapacityMetrics(r)
        #: Webhook tries and outcomes, the deliveries' backlog, disabled endpoints (issue 45).
        self.webhooks = WebhookMetrics(r)

    def watch_relay(self, state: RelayState) -> None:
        """Show the LISTEN relay's state (``onejob_listen_connected``, ``..._reconnects``)."""
        self._relay = state
        self._sync_relay()

    def _sync_relay(self) -> None:
        state = self._relay
        if state is None:
            return
        self.listen_connected.set(1 if state.connected else 0)
        self.listen_reconnects.inc(state.reconnects - self._reconnects_shown)
        self._reconnects_shown = state.reconnects

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
        """Set the unknown-attempts gauges from the database (all processes' attempts),
        and the webhooks' backlog where the store offers it."""
        self._sync_relay()
        backlog = getattr(store, "webhook_backlog", None)
        if backlog is not None:
            self.webhooks.show(await backlog(), dt.datetime.now(dt.UTC))
        by_age = getattr(store, "unknown_by_provider_and_age", None)
        if by_age is not None:
            counts = await by_age(UNKNOWN_AGE_BOUNDS, UNKNOWN_AGE_OLDER)
            # A bucket that emptied must not keep its last count. It is set to 0, not
            # removed: another process's file may hold it, and the latest write wins there.
            for labels in self._unknown_by_age_shown() - counts.keys():
                self.attempts_unknown_by_age.labels(*labels).set(0)
            for (provider, age), n in counts.items():
                self.attempts_unknown_by_age.labels(provider=provider, age=age).set(n)
        count = getattr(store, "count_attempts", None)  # a COUNT(*) where the store offers one
        if count is not None:
            self.attempts_unknown.set(int(await count(AttemptState.UNKNOWN)))
            return
        unknown = await store.list_attempts(AttemptState.UNKNOWN, limit=UNKNOWN_SCAN_LIMIT)
        self.attempts_unknown.set(len(unknown))

    def render(self) -> tuple[bytes, str]:
        """Return the exposition body and its content type (all processes' in multiprocess)."""
        self._sync_relay()
        return generate_latest(self._exposed()), CONTENT_TYPE_LATEST

    def process_ended(self) -> None:
        """Drop this process's live gauges from the shared files (a clean shutdown)."""
        path = multiprocess_dir()
        if path is not None:
            _mark_dead(os.getpid(), path)

    def _exposed(self) -> CollectorRegistry:
        path = multiprocess_dir()
        if path is None:
            return self.registry
        _forget_dead_processes(path)
        merged = CollectorRegistry()
        merged.register(_MultiProcessCollector(path))
        return merged

    def _unknown_by_age_shown(self) -> set[tuple[str, str]]:
        """Return the (provider, age) pairs a scrape shows now, of every process."""
        path = multiprocess_dir()
        gauge = self.attempts_unknown_by_age
        if path is None:
            families = gauge.collect()
        else:  # only the mostrecent gauges' files: this runs on every refresh
            files = glob.glob(os.path.join(path, "gauge_mostrecent_*.db"))
            families = _MultiProcessCollector.merge(files)
        name = next(iter(gauge.describe())).name
        return {
            (sample.labels["provider"], sample.labels["age"])
            for family in families
            if family.name == name
            for sample in family.samples
        }


class _MultiProcessCollector:
    """prometheus_client's collector of the shared files (typed here: the library is not)."""

    def __init__(self, path: str) -> None:
        self._path = path

    def collect(self) -> Iterable[Metric]:
        """Merge every file of the directory (what ``MultiProcessCollector.collect`` does)."""
        return self.merge(glob.glob(os.path.join(self._path, "*.db")))

    @staticmethod
    def merge(files: list[str]) -> Iterable[Metric]:
        """Merge only ``files`` (of one kind of metric), as ``collect`` merges them all."""
        merge = multiprocess.MultiProcessCollector.merge
        families: Iterable[Metric] = merge(files, accumulate=True)  # type: ignore[no-untyped-call]
        return families


def _mark_dead(pid: int, path: str) -> None:
    multiprocess.mark_process_dead(pid, path)  # type: ignore[no-untyped-call]


def _forget_dead_processes(path: str) -> None:
    """Remove the live gauges of processes that ended without saying so (SIGKILL)."""
    for file in glob.glob(os.path.join(path, "gauge_live*_*.db")):
        match = _LIVE_GAUGE_FILE.search(file)
        if match is None:
            continue
        pid = int(match.group(1))
        if not _alive(pid):
            _mark_dead(pid, path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - another user's process took the pid
        return True
    return True
