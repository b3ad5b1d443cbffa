"""Metrics of webhook deliveries (issue 45).

Part of ``gateway.metrics.Metrics`` (``metrics.webhooks``), on its registry. The counters
are this process's tries (summed over the server processes in multiprocess mode); the
gauges read from the database are every process's, set by whoever read them last
(``mostrecent``): ``/metrics`` and the reaper refresh them (``Metrics.refresh``).
"""

from __future__ import annotations

import datetime as dt
import enum

from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.domain.webhooks import WebhookBacklog


class TryOutcome(enum.StrEnum):
    """How one try of a delivery went."""

    #: The endpoint answered 2xx: the delivery is delivered.
    DELIVERED = "delivered"
    #: The endpoint answered another status (a redirect too, never followed).
    STATUS = "status"
    #: No answer: the connection failed or the request timed out.
    NO_ANSWER = "no_answer"
    #: The destination was refused before the request (a private address now).
    REFUSED = "refused"


class WebhookMetrics:
    """Tries and their outcomes, deliveries given up, the backlog, disabled endpoints."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.tries = Counter(
            "onejob_webhook_tries",
            "Webhook delivery tries this process made, by outcome (delivered, status, "
            "no_answer, refused).",
            ["outcome"],
            registry=r,
        )
        self.given_up = Counter(
            "onejob_webhook_deliveries_failed",
            "Webhook deliveries given up, by why (schedule: the retry schedule ran out; gone: "
            "the endpoint answered 410).",
            ["reason"],
            registry=r,
        )
        self.disabled_now = Counter(
            "onejob_webhooks_disabled_by_410",
            "Webhook subscriptions this process disabled because their endpoint answered 410.",
            registry=r,
        )
        self.pending = Gauge(
            "onejob_webhook_deliveries_pending",
            "Webhook deliveries to send or send again, every subscription's (from the database).",
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.oldest_pending = Gauge(
            "onejob_webhook_oldest_pending_seconds",
            "Age of the oldest pending webhook delivery, since it was made (0: none pending).",
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.disabled = Gauge(
            "onejob_webhooks_disabled",
            "Live webhook subscriptions disabled (their endpoint answered 410).",
            registry=r,
            multiprocess_mode="mostrecent",
        )

    def tried(self, outcome: TryOutcome) -> None:
        """Count one try."""
        self.tries.labels(outcome=outcome.value).inc()

    def failed(self, reason: str) -> None:
        """Count a delivery given up (``schedule`` or ``gone``); a 410 disabled its endpoint."""
        self.given_up.labels(reason=reason).inc()
        if reason == "gone":
            self.disabled_now.inc()

    def show(self, backlog: WebhookBacklog, now: dt.datetime) -> None:
        """Set the gauges read from the database."""
        self.pending.set(backlog.pending)
        oldest = backlog.oldest_pending
        self.oldest_pending.set(max((now - oldest).total_seconds(), 0.0) if oldest else 0.0)
        self.disabled.set(backlog.disabled)
