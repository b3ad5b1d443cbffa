"""Webhooks per Standard Webhooks (issue 45): subscriptions, deliveries, their signature.

An event is read from the job's audit trail (``job_events``), never written by the
change itself: ``event_type`` says which audit events a receiver hears of, and as what.
Signing follows the specification: ``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``
keyed by the base64-decoded ``whsec_`` secret; during a rotation both secrets sign.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import enum
import hashlib
import hmac
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.domain.records import JobRecord

#: What a subscription may ask for, as the specification's dotted names.
EVENT_TYPES = ("job.succeeded", "job.failed", "job.cancelled", "attempt.unknown")
#: The type of a delivery asked for by ``POST /v1/webhooks/{id}/test``.
TEST_EVENT = "webhook.test"
SECRET_PREFIX = "whsec_"
SECRET_BYTES = 24  #: bytes of randomness in a secret (the specification asks 24 to 64)


def event_type(kind: str, detail: dict[str, Any]) -> str | None:
    """Return the webhook event an audit event is, or None when receivers hear nothing."""
    if kind == "attempt_succeeded" or (kind == "attempt_resolved" and detail.get("won")):
        return "job.succeeded"
    return {
        "job_failed": "job.failed",
        "job_cancelled": "job.cancelled",
        "attempt_unknown": "attempt.unknown",
    }.get(kind)


class DeliveryStatus(enum.StrEnum):
    """Where a delivery stands."""

    #: To be sent (again) at ``next_at``.
    PENDING = "pending"
    #: The endpoint answered 2xx.
    DELIVERED = "delivered"
    #: Given up: the retry schedule ran out, or the endpoint answered 410.
    FAILED = "failed"


@dataclasses.dataclass(frozen=True, slots=True)
class Webhook:
    """A subscription: where to send which events of whose jobs, and how to sign them."""

    id: str
    owner_id: str
    #: Every owner's jobs (made with the ``admin`` scope), not only ``owner_id``'s.
    all_owners: bool
    url: str
    events: tuple[str, ...]
    secret: str
    #: The secret before the last rotation, still signing until ``previous_until``.
    previous_secret: str | None
    previous_until: dt.datetime | None
    #: Every audit event (``job_events.id``) up to this one has been looked at, for good.
    cursor: int
    #: The last audit event read; ids missing below it are ``gaps``.
    seen: int
    #: Ids missing when read (a transaction not yet committed, or rolled back), read again
    #: until settled: (first id, last id, when noticed as stored: ISO, naive UTC).
    gaps: tuple[tuple[int, int, str], ...]
    created_at: dt.datetime
    disabled_at: dt.datetime | None
    disabled_reason: str | None

    def secrets_at(self, now: dt.datetime) -> tuple[str, ...]:
        """Return the secrets that sign at ``now``: the current one, and the previous one
        while its rotation window lasts."""
        if self.previous_secret and self.previous_until and now < self.previous_until:
            return (self.secret, self.previous_secret)
        return (self.secret,)


@dataclasses.dataclass(frozen=True, slots=True)
class NewDelivery:
    """An event to send to one subscription (the store names it: its ``webhook-id``)."""

    event_id: int | None
    type: str
    job_id: str | None
    payload: dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Delivery:
    """An event sent, or to be sent, to one subscription, with its last outcome."""

    id: str
    webhook_id: str
    event_id: int | None
    type: str
    job_id: str | None
    payload: dict[str, Any]
    status: DeliveryStatus
    tries: int
    next_at: dt.datetime | None
    last_status: int | None
    last_error: str | None
    created_at: dt.datetime
    delivered_at: dt.datetime | None


@dataclasses.dataclass(frozen=True, slots=True)
class EventBatch:
    """Audit events a subscription had not looked at: those it hears of, and its new cursor,
    last id seen and gaps (see ``gateway.store.webhooks`` and docs/decisions.md)."""

    webhook: Webhook
    events: Sequence[tuple[int, str, str, dt.datetime]]  #: (event id, type, job id, at)
    cursor: int
    seen: int
    gaps: tuple[tuple[int, int, str], ...]
    #: The jobs of the events, by id, each read once for every subscription's batch of one
    #: pass (the batches share it); a job pruned meanwhile is missing.
    jobs: Mapping[str, JobRecord] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class WebhookBacklog:
    """What the metrics show of every subscription's deliveries, read from the database."""

    #: Deliveries to send (again), due or not.
    pending: int
    #: When the oldest of them was made (None: none is pending).
    oldest_pending: dt.datetime | None
    #: Live subscriptions disabled (their endpoint answered 410).
    disabled: int


def new_secret() -> str:
    """Return a fresh ``whsec_`` secret."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def secret_key(secret: str) -> bytes:
    """Return the HMAC key of a ``whsec_`` secret (its base64-decoded rest)."""
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def signature(secrets_: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """Return the ``webhook-signature`` header: one ``v1,<sig>`` per secret, space-separated."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return " ".join(
        "v1," + base64.b64encode(hmac.new(secret_key(s), signed, hashlib.sha256).digest()).decode()
        for s in secrets_
    )


def payload_time(at: dt.datetime) -> str:
    """Return ``at`` as a payload's ``timestamp`` (RFC 3339, UTC, milliseconds)."""
    return at.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
