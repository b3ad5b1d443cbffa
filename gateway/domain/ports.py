"""Every seam of the gateway, in one file: what each side may count on from the other.

| seam | implemented by |
|---|---|
| ``JobStore`` (with ``ApiKeys``) | ``gateway.store.SqlJobStore`` (PostgreSQL and SQLite) |
| ``Provider``, ``Reconcilable`` | the protocol adapters (``providers.<protocol>.adapter``) |
| ``ContractSpec``, ``Certifications``, ``Verdict`` | ``contracts.loader``, ``contracts.registry`` |
| ``FailoverSuspensions`` | ``contracts.registry`` (certificates' expiry, suspensions) |
| ``ShadowStore``, ``WebhookStore`` | ``gateway.store.SqlJobStore`` (``.shadow``, ``.webhooks``) |
| ``LocalRunner`` | the dispatcher (``gateway.dispatch.first_attempts``) |
| ``BackgroundService`` | the dispatcher and the LISTEN relay (``gateway.background``) |
| ``Clock``, ``IdFactory`` | ``gateway.domain.clock`` (the system's, and manual ones for tests) |

The store's methods are named after use cases, not CRUD. Every state change is one
transaction whose guard is a conditional UPDATE; business outcomes come back as values
(see ``records``). The implementations satisfy these structurally: none imports this file
to inherit from it (the providers package sits below the gateway).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from gateway.domain.capacity import CapacityNews, SharedCapacity
from gateway.domain.records import (
    AddAttemptResult,
    AttemptRecord,
    ClaimedAttempt,
    ClaimSpec,
    CreateResult,
    EventRecord,
    FinalizeResult,
    JobRecord,
    NewJob,
    Principal,
    TransitionResult,
)
from gateway.domain.shadow_records import ShadowCandidate, ShadowOutcome, ShadowTally
from gateway.domain.states import AttemptReason, AttemptState, JobStatus
from gateway.domain.webhooks import Delivery, DeliveryStatus, EventBatch, NewDelivery, Webhook

if TYPE_CHECKING:  # data models only: the domain runs without the providers package
    from providers.base import ProviderRequest, ProviderResult
    from providers.config import ProviderConfig
    from providers.lookup import StoredAnswer


class ContractSpec(Protocol):
    """What the gateway needs of a contract (``contracts.model.Contract`` is the one)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def hedgeable(self) -> bool: ...

    @property
    def input_schema(self) -> Mapping[str, Any]: ...

    @property
    def output_schema(self) -> Mapping[str, Any]: ...

    def validate_input(self, value: Any) -> list[str]: ...

    def validate_output(self, value: Any) -> list[str]: ...

    def render(self, input: Any) -> Any:
        """The call's messages for ``input`` (what ``provider_request`` takes as ``prompt``)."""
        ...

    def provider_request(
        self,
        input: Any,
        *,
        model: str,
        timeout: float,
        idempotency_key: str | None,
        max_output_tokens: int | None = None,
        prompt: Any = None,
    ) -> ProviderRequest: ...


class Verdict(Protocol):
    """What the certification registry says about one failover, and why."""

    @property
    def allowed(self) -> bool: ...

    @property
    def reason(self) -> str: ...


class Certifications(Protocol):
    """The certification seam (DESIGN §6): may ``fallback`` replace ``primary`` for a contract.

    ``contracts.registry.CertificationRegistry`` is the one; it fails closed.
    """

    def can_failover(
        self, contract: Any, primary: ProviderConfig, fallback: ProviderConfig
    ) -> Verdict:
        """Decide for ``contract``: a ``ContractSpec`` from the same catalog, which the
        registry reads further (its fingerprint, its cases)."""
        ...


@runtime_checkable
class FailoverSuspensions(Protocol):
    """What the shadow checks and the failover matrix read and write beside the verdicts."""

    def latest_certificate(self, contract: str, provider: str) -> dict[str, Any] | None:
        """The newest live/record certificate of ``provider`` for ``contract``, if any."""
        ...

    def suspension(self, contract: str, primary: str, fallback: str) -> dict[str, Any] | None:
        """The pair's suspension in force (``contracts.suspensions``), or None."""
        ...

    def suspend(self, suspension: Mapping[str, Any]) -> bool:
        """Record a suspension; False when one already holds for the same certificate."""
        ...


@runtime_checkable
class ShadowStore(Protocol):
    """Shadow checks (issue 38): succeeded jobs re-run on certified fallbacks, kept apart
    from the jobs (no attempt, no event)."""

    async def shadow_candidates(
        self, after: tuple[dt.datetime, str], contracts: Sequence[str], *, limit: int
    ) -> list[ShadowCandidate]:
        """Succeeded jobs their primary won, past ``after`` (``updated_at``, id), in order."""
        ...

    async def begin_shadow_check(
        self, job_id: str, contract: str, primary: str, fallback: str
    ) -> tuple[str, str] | None:
        """Claim one check; (check id, its downstream key), or None when already claimed."""
        ...

    async def finish_shadow_check(
        self, check_id: str, outcome: ShadowOutcome, detail: dict[str, Any]
    ) -> bool:
        """Record a pending check's outcome."""
        ...

    async def shadow_calls_since(self, since: dt.datetime) -> int:
        """Count the checks every process started since ``since``."""
        ...

    async def shadow_tally(
        self, contract: str, primary: str, fallback: str, *, since: dt.datetime, window: int
    ) -> ShadowTally:
        """Tally the pair's newest ``window`` judged checks started since ``since``."""
        ...


class WebhookStore(Protocol):
    """Webhooks (issue 45), as ``gateway.store.webhooks`` says; owner None: the admin's."""

    # fmt: off
    async def create_webhook(self, owner_id: str, url: str, events: Sequence[str], *, all_owners: bool) -> Webhook: ...  # noqa: E501
    async def list_webhooks(self, owner_id: str | None, *, enabled_only: bool = False) -> list[Webhook]: ...  # noqa: E501
    async def get_webhook(self, webhook_id: str, owner_id: str | None) -> Webhook | None: ...
    async def delete_webhook(self, webhook_id: str, owner_id: str | None) -> bool: ...
    async def rotate_webhook_secret(self, webhook_id: str, owner_id: str | None, *, window: float) -> Webhook | None: ...  # noqa: E501
    async def webhook_events(self, webhooks: Sequence[Webhook], *, settle_before: dt.datetime, limit: int = 1000) -> list[EventBatch]: ...  # noqa: E501
    async def enqueue_deliveries(self, batch: EventBatch, deliveries: Sequence[NewDelivery]) -> None: ...  # noqa: E501
    async def add_delivery(self, webhook_id: str, delivery: NewDelivery) -> Delivery: ...
    async def due_deliveries(self, *, lease: float, limit: int = 50) -> list[tuple[Delivery, Webhook]]: ...  # noqa: E501
    async def record_delivery(self, delivery_id: str, *, status: DeliveryStatus, answer: int | None, error: str | None, next_at: dt.datetime | None, disable: str | None = None) -> None: ...  # noqa: E501
    async def list_deliveries(self, webhook_id: str, owner_id: str | None, *, limit: int = 100, cursor: str | None = None) -> tuple[list[Delivery], str | None] | None: ...  # noqa: E501
    async def redeliver(self, webhook_id: str, delivery_id: str, owner_id: str | None) -> Delivery | None: ...  # noqa: E501
    # fmt: on


class ApiKeys(Protocol):
    """API keys: the principal behind a bearer key (DESIGN R1); only sha256s are stored."""

    async def create_api_key(self, owner_id: str, scopes: frozenset[str]) -> tuple[str, str]:
        """Create a key; return ``(key_id, secret)``."""
        ...

    async def authenticate(self, secret: str) -> Principal | None:
        """Return the principal of an unrevoked key, or None (read on every request, so a
        revoked key is refused at once by every process)."""
        ...

    async def revoke_api_key(self, key_id: str) -> bool:
        """Revoke a key; say whether it was active."""
        ...


class JobStore(ApiKeys, WebhookStore, Protocol):
    """Durable jobs and attempts, and the API keys that own them: the database decides
    every race."""

    async def create_or_get(self, new: NewJob, claim: ClaimSpec | None = None) -> CreateResult:
        """Insert the job, its first attempt and events; on a key clash replay or conflict.

        With ``claim``, a created job's first attempt is inserted claimed by that worker.
        """
        ...

    async def create_or_get_for_key(
        self, secret: str, new: NewJob, claim: ClaimSpec | None = None
    ) -> CreateResult | None:
        """``create_or_get`` checking the API key in the creating statement, for the owner
        of the key ``secret`` (``new.owner_id`` unused); None when that cannot be told in
        one statement: the key is unknown or revoked, or the key's job is not visible yet.
        The caller then authenticates and creates."""
        ...

    async def get_job(self, job_id: str, owner_id: str | None = None) -> JobRecord | None:
        """Load a job with its attempts (``owner_id`` None: any owner, for internal use)."""
        ...

    async def list_jobs(
        self, owner_id: str | None, *, status: JobStatus | None, limit: int, cursor: str | None
    ) -> tuple[list[JobRecord], str | None]:
        """List an owner's jobs (None: every owner's) newest first, with the cursor of the
        next page."""
        ...

    async def get_job_by_key(self, owner_id: str, idempotency_key: str) -> JobRecord | None:
        """Load the job an owner's Idempotency-Key made, with its attempts (None: none)."""
        ...

    async def add_attempt(
        self,
        job_id: str,
        provider: str,
        reason: AttemptReason,
        *,
        owner_id: str | None = None,
        allow_running: bool = False,
    ) -> AddAttemptResult:
        """Add an attempt if R4 allows (``allow_running`` only for the dispatcher's hedge)."""
        ...

    async def claim_next_attempt(
        self,
        worker_id: str,
        *,
        lease_ttl: float,
        deadline_s: dict[str, float],
        default_deadline_s: float,
        exclude: Sequence[str] = (),
    ) -> ClaimedAttempt | None:
        """Claim the first unsent attempt in line (``starting``, or ``waiting`` past its
        ``ready_at``), none of a provider in ``exclude``, none of a job past its deadline:
        ``running``, with a lease and a deadline (never past the job's).

        Records ``read_version`` from the job. ``deadline_s`` maps provider -> seconds.
        """
        ...

    async def wait_attempt(
        self,
        attempt_id: str,
        worker_id: str,
        *,
        ready_at: dt.datetime,
        error: dict[str, Any],
    ) -> TransitionResult:
        """Put this worker's running attempt back to wait for capacity until ``ready_at``
        (``waiting``, no lease), with an ``attempt_waiting`` event (issue 43)."""
        ...

    async def expire_overdue(self, limit: int = 100) -> list[str]:
        """Fail jobs whose deadline passed while an attempt was still unsent
        (``job_deadline``); return those attempts' ids."""
        ...

    async def queue_depth(self) -> dict[str, dict[str, int]]:
        """Count unsent attempts by provider and state (``starting``, ``waiting``)."""
        ...

    async def share_capacity(
        self,
        instance_id: str,
        members: Sequence[str],
        seen_until: dt.datetime,
        news: Sequence[CapacityNews] = (),
    ) -> list[SharedCapacity]:
        """Renew this process's slice of the providers it paces, publish what it learned of
        their capacity, and return what every process knows (``gateway.store.capacity``)."""
        ...

    async def renew_lease(self, attempt_id: str, worker_id: str, *, lease_ttl: float) -> bool:
        """Extend the lease of a running attempt this worker holds."""
        ...

    async def mark_unknown(
        self,
        attempt_id: str,
        error: dict[str, Any],
        *,
        expected: AttemptState = AttemptState.RUNNING,
    ) -> TransitionResult:
        """Move an attempt (and its job) to ``unknown``: its outcome is not known."""
        ...

    async def extend_deadline(
        self, attempt_id: str, worker_id: str, *, deadline_s: float, lease_ttl: float
    ) -> bool:
        """Give this worker's running attempt, not sent yet, a fresh deadline and lease."""
        ...

    def never_sent(
        self, attempt_id: str, worker_id: str, started_at: dt.datetime | None = None
    ) -> None:
        """Remember that this worker's claim of the attempt (made at ``started_at``) was
        surely never sent."""
        ...

    async def release_unsent(self) -> list[str]:
        """Put the attempts ``never_sent`` names back in the queue once the database answers."""
        ...

    async def fail_attempt(
        self, attempt_id: str, error: dict[str, Any], *, next_provider: str | None = None
    ) -> TransitionResult:
        """Record a definite failure; add a ``failover`` attempt on ``next_provider`` if given.

        Without a next provider and with nothing else in flight, the job becomes ``failed``.
        """
        ...

    async def finalize(
        self,
        attempt_id: str,
        result: Any,
        *,
        provider_request_id: str | None = None,
        reported_model: str | None = None,
    ) -> FinalizeResult:
        """Compare-and-swap the job's result (R5); the loser is ``lost`` and its payload dropped."""
        ...

    async def cancel(self, job_id: str, owner_id: str | None = None) -> TransitionResult:
        """Cancel through CAS: unsent attempts are cancelled, in-flight ones will lose."""
        ...

    async def resolve(
        self,
        attempt_id: str,
        outcome: AttemptState,
        *,
        result: Any = None,
        note: str = "",
        next_provider: str | None = None,
        evidence: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> TransitionResult:
        """Resolve an ``unknown`` attempt out of band (``succeeded`` goes through R5).

        With ``failed`` and a ``next_provider``, the failover attempt is added in the same
        transaction. ``evidence`` (what a reconciler found) is audited and kept on the
        attempt; ``error`` is the failed attempt's error.
        """
        ...

    async def record_finding(self, attempt_id: str, finding: dict[str, Any]) -> bool:
        """Keep what the reconciler found on a still ``unknown`` attempt; False if it moved."""
        ...

    async def reap_expired_leases(self) -> list[AttemptRecord]:
        """Turn running attempts whose lease expired into ``unknown`` (reason ``lease_expired``)."""
        ...

    async def get_attempt(self, attempt_id: str) -> AttemptRecord | None:
        """Load one attempt by id (any owner)."""
        ...

    async def list_attempts(
        self, state: AttemptState | None, *, limit: int = 100
    ) -> list[AttemptRecord]:
        """List attempts in a state, all owners (admin)."""
        ...

    async def count_attempts(self, state: AttemptState) -> int:
        """Count attempts in ``state`` (metrics)."""

    async def events(
        self, job_id: str, after: int | None = None, owner_id: str | None = None
    ) -> list[EventRecord]:
        """Return a job's audit trail, oldest first (``after``: past that id; by its owner)."""
        ...

    async def record_event(
        self, job_id: str, kind: str, detail: dict[str, Any], attempt_id: str | None = None
    ) -> None:
        """Append an audit event on its own (e.g. a refused request)."""
        ...

    async def prune_jobs(
        self, older_than: dt.datetime, *, batch: int = 1000, dry_run: bool = False
    ) -> int:
        """Delete a batch of settled jobs created before ``older_than``; return how many."""
        ...

    async def ping(self, timeout: float = 1.0) -> None:
        """Raise if the database does not answer within ``timeout`` seconds (readiness)."""

    def unavailable(self, exc: BaseException, where: str) -> bool:
        """Say whether ``exc`` means the database is unavailable, not a bug; count it if so.

        The caller answers 503 or tries later and logs nothing: the store logs the outage
        once, when it starts and when it ends, with the failures counted by ``where``.
        """
        ...

    async def close(self) -> None:
        """Dispose of the engine."""
        ...


class Provider(Protocol):
    """One configured provider, speaking one wire protocol over an injected client."""

    name: str

    async def call(self, request: ProviderRequest) -> ProviderResult:
        """Call the provider once; raise a ``providers.base.ProviderError`` on failure."""
        ...


@runtime_checkable
class Reconcilable(Protocol):
    """A provider adapter that can be asked about an attempt after the fact
    (``providers.lookup`` says what each answer proves)."""

    name: str

    async def lookup(self, downstream_key: str, *, timeout: float) -> StoredAnswer | None:
        """Return what the provider stored under ``downstream_key``; None when nothing."""
        ...


class BackgroundService(Protocol):
    """Something that runs beside the HTTP server for the app's lifetime."""

    async def start(self) -> None:
        """Start; return once running."""
        ...

    async def stop(self) -> None:
        """Stop what was started; return once stopped."""
        ...


class Clock(Protocol):
    """Tell the current time (UTC, timezone-aware)."""

    def now(self) -> dt.datetime:
        """Return the current time."""
        ...


class IdFactory(Protocol):
    """Make new identifiers with a type prefix."""

    def new(self, prefix: str) -> str:
        """Return a new ``<prefix>_<id>``."""
        ...


class LocalRunner(Protocol):
    """Run a new job's first attempt in the process that created it (the dispatcher fits)."""

    async def reserve(self, provider: str, job: NewJob | None = None) -> ClaimSpec | None:
        """Take a free runner slot; None when every runner is busy (the job queues).

        With ``job``, the spec may carry work to do while the job's creation is on the
        wire (``ClaimSpec.meanwhile``)."""
        ...

    def release(self) -> None:
        """Give back a reserved slot that claimed nothing."""
        ...

    def run_claimed(
        self, claimed: ClaimedAttempt, spec: ClaimSpec | None = None
    ) -> asyncio.Task[JobRecord | None]:
        """Run the claimed attempt in the reserved slot; the task returns the decided job.

        ``spec`` is the one ``reserve`` returned for it (what its ``meanwhile`` did)."""
        ...


def utcnow_naive(value: dt.datetime) -> dt.datetime:
    """Drop tzinfo after converting to UTC (how timestamps are stored)."""
    return value.astimezone(dt.UTC).replace(tzinfo=None)
