"""Metrics of certification at run time (issue 38): shadow checks, suspensions, expiry.

Part of ``gateway.metrics.Metrics`` (``metrics.certification``), on its registry. The
gauges read from the database or the registry file are set by whoever read them last
(``mostrecent`` across server processes): ``/metrics`` refreshes them on every scrape
(``gateway.service.about``), the shadow checks after each check.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

PAIR = ("contract", "primary", "fallback")


class CertificationMetrics:
    """Shadow calls and checks, disagreement rates, suspensions, days to expiry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.shadow_calls = Counter(
            "onejob_shadow_calls",
            "Shadow provider calls this process sent, by fallback (bounded by [shadow] "
            "calls_per_hour).",
            ["provider"],
            registry=r,
        )
        self.shadow_checks = Counter(
            "onejob_shadow_checks",
            "Shadow checks finished, by pair and outcome (agreed, disagreed, error).",
            [*PAIR, "outcome"],
            registry=r,
        )
        self.shadow_calls_last_hour = Gauge(
            "onejob_shadow_calls_last_hour",
            "Shadow calls every process started in the last hour (from the database).",
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.shadow_calls_limit = Gauge(
            "onejob_shadow_calls_per_hour_limit",
            "The shadow call budget per hour ([shadow] calls_per_hour; 0 when off).",
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.disagreement_rate = Gauge(
            "onejob_shadow_disagreement_rate",
            "Share of judged shadow checks where the fallback disagreed with the primary, "
            "since the fallback's certificate.",
            list(PAIR),
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.judged = Gauge(
            "onejob_shadow_checks_judged",
            "Judged shadow checks behind the disagreement rate.",
            list(PAIR),
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.suspended = Gauge(
            "onejob_failover_suspended",
            "1 while failover from primary to fallback is suspended by the shadow checks.",
            list(PAIR),
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.suspensions = Counter(
            "onejob_failover_suspensions",
            "Failovers this process suspended because shadow checks disagreed.",
            list(PAIR),
            registry=r,
        )
        self.days_to_expiry = Gauge(
            "onejob_certificate_days_to_expiry",
            "Days until the newest certificate of a provider for a contract expires "
            "(negative: expired).",
            ["contract", "provider"],
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.recertifications = Counter(
            "onejob_recertifications",
            "Certifications the scheduled re-certification pass ran, by verdict.",
            ["contract", "provider", "verdict"],
            registry=r,
        )
