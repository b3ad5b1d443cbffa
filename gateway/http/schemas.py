"""The typed response bodies: what each route answers, as the OpenAPI document shows it.

Handlers build their JSON with the plain views of ``views`` (cheaper on the hot path than
building a struct and encoding it); these structs say the same shapes to the document, and
``tests/integration/http/test_response_schemas.py`` converts real answers to them, strictly
and with unknown fields refused, so the two cannot drift.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.domain.states import AttemptReason, AttemptState, JobStatus


class Strict(msgspec.Struct, forbid_unknown_fields=True):
    """A response body: every field always present (``None`` shown as ``null``)."""


class AttemptView(Strict):
    """One attempt, as its job's owner sees it."""

    id: str
    number: int
    provider: str
    reason: AttemptReason
    state: AttemptState
    error: dict[str, Any] | None
    #: RFC 3339 UTC, e.g. ``2026-03-03T09:15:00.000Z``.
    started_at: str | None
    finished_at: str | None
    #: A ``waiting`` attempt is not sent again before this time; null otherwise.
    ready_at: str | None
    #: How many times its provider said not now to it (each a wait, not a new attempt).
    waits: int


class WaitingView(Strict):
    """Why a job waits for capacity, and until when (its waiting attempt's)."""

    attempt_id: str
    provider: str
    #: ``rate_limited``, ``overloaded`` (the provider said so), or why it was not sent:
    #: ``paced``, ``paused``, ``circuit_open``, ``concurrency``.
    reason: str
    #: Not sent again before this time (RFC 3339 UTC).
    until: str | None
    waits: int


class TraceView(Strict):
    """The W3C trace context a job was created in (docs/telemetry.md)."""

    #: The ``traceparent`` its spans join: the creating request's span's with tracing on,
    #: else the caller's.
    traceparent: str
    #: Its trace id (32 hex digits): what to search a tracing backend for.
    trace_id: str
    tracestate: str | None


class JobView(Strict):
    """A job with its attempts (DESIGN §4)."""

    id: str
    owner: str
    idempotency_key: str
    contract: str
    provider: str
    status: JobStatus
    version: int
    #: The attempt whose result is the job's result.
    completed_by: str | None
    result: Any
    error: dict[str, Any] | None
    created_at: str | None
    updated_at: str | None
    #: Nothing is sent for the job after this time; a job still waiting for capacity
    #: then fails with ``job_deadline`` (null: a job from before deadlines).
    deadline_at: str | None
    #: Set while the job waits for its provider's capacity: why, and until when.
    waiting: WaitingView | None
    #: The trace context it was created in (null: none was given and tracing was off).
    trace: TraceView | None
    attempts: list[AttemptView]


class AddedAttemptView(JobView):
    """``POST /v1/jobs/{id}/attempts``: the job, and the attempt just added."""

    attempt_id: str | None


class JobPage(Strict):
    """One page of the caller's jobs, newest first."""

    jobs: list[JobView]
    #: Pass as ``cursor`` for the next page; ``null``: this was the last.
    next_cursor: str | None


class EventView(Strict):
    """One audit event."""

    id: int
    kind: str
    attempt_id: str | None
    detail: dict[str, Any]
    at: str | None


class JobEvents(Strict):
    """A job's audit trail, oldest first."""

    job_id: str
    events: list[EventView]


class ReconcilerView(msgspec.Struct):
    """What the reconciler last found asking the provider (absent members: not known)."""

    last_checked_at: str | None = None
    finding: str | None = None
    completion_id: str | None = None
    message: str | None = None


class AdminAttemptView(AttemptView):
    """One attempt, as an admin sees it: with its job, owner and timing details."""

    job_id: str
    owner: str | None
    contract: str | None
    downstream_key: str | None
    provider_request_id: str | None
    reported_model: str | None
    lease_owner: str | None
    deadline_at: str | None
    created_at: str | None
    reconciler: ReconcilerView | None


class AdminAttempts(Strict):
    """Attempts in a state, all owners."""

    attempts: list[AdminAttemptView]


class Resolved(Strict):
    """``POST /v1/admin/attempts/{id}/resolve``: the attempt as resolved, and its job."""

    attempt: AdminAttemptView | None
    job: JobView | None


class ContractRoute(Strict):
    """Where a contract's jobs go: the primary, then the fallbacks in order."""

    primary: str
    fallbacks: list[str]


class ContractView(Strict):
    """A contract a client may name."""

    name: str
    description: str
    hedgeable: bool
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    route: ContractRoute | None


class Contracts(Strict):
    """The contracts of the catalog."""

    contracts: list[ContractView]


class ContractBudget(Strict):
    """What a contract's ``[budget]`` allows a provider per case (null: not limited)."""

    latency_p95_ms: float | None
    output_tokens_per_case: float | None
    cost_per_case_usd: float | None


class CertificateUsage(Strict):
    """What a provider's calls took and cost in the run that wrote its certificate."""

    calls: int | None
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    output_tokens_per_case: float | None
    #: Null when no price was given for the provider (``onejob certify --price``).
    cost_per_case_usd: float | None
    #: The tokenizer that counted the tokens when the provider reported no usage (the
    #: token and cost figures are then estimates); null when the provider reported them.
    tokens_estimated: str | None
    #: The limits of the contract's current budget these figures exceed, by their
    #: ``[budget]`` names (``latency_p95_ms``, ``output_tokens_per_case``,
    #: ``cost_per_case_usd``).
    over_budget: list[str]


class BudgetVerdict(Strict):
    """Whether a certificate passed the budget it was judged against, and why not."""

    passed: bool
    reason: str


class CertificateView(Strict):
    """A provider's newest live/record certificate for a contract."""

    verdict: str
    mode: str
    model: str | None
    adapter_version: str | None
    contract_fingerprint: str | None
    certified_at: str
    expires_at: str
    repeats: int | None
    cases: int | None
    pass_rates: dict[str, float] | None
    failures: list[dict[str, Any]] | None
    run_id: str | None
    days_to_expiry: float | None
    #: Null for a certificate recorded without usage (before issue 38's budgets).
    usage: CertificateUsage | None
    budget_verdict: BudgetVerdict | None
    #: What its answers on production inputs showed (``certify --production N``, issue 48),
    #: per primary: ``primary``, ``wanted``, ``drawn``, ``judged``, ``disagreed``, ``errors``,
    #: ``disagreement_rate``, ``threshold``, ``min_samples``, ``verdict`` (``passed``,
    #: ``refused``, ``not judged``, ``skipped``), ``fields`` (names and counts, never
    #: values), ``skipped``; null for a certificate recorded before it.
    production: list[dict[str, Any]] | None


class CertificationRow(Strict):
    """May ``fallback`` replace ``primary`` for ``contract``, and why."""

    contract: str
    primary: str
    fallback: str
    allowed: bool
    reason: str
    detail: str
    fingerprint: str | None
    #: The contract's budget (null when it declares none).
    budget: ContractBudget | None
    primary_certificate: CertificateView | None
    fallback_certificate: CertificateView | None
    #: The earlier expiry of the pair's two certificates, days to it, and whether it is
    #: within ``[certification] within_days`` (issue 38).
    expires_at: str | None
    days_to_expiry: float | None
    recertify_due: bool
    #: The suspension the shadow checks recorded, and their tally (null when off).
    suspended: dict[str, Any] | None
    shadow: dict[str, Any] | None


class Certifications(Strict):
    """The effective failover matrix."""

    certifications: list[CertificationRow]


class ProviderView(Strict):
    """One configured provider and its capacity as this gateway sees it (issue 43)."""

    name: str
    protocol: str
    model: str
    #: ``closed`` (calls go), ``open`` (none go until ``circuit_until``; attempts fail over
    #: to a certified fallback, or wait), ``half_open`` (one probe is out).
    circuit: str
    circuit_until: str | None
    #: The provider asked every caller to wait until then (Retry-After), and why.
    paused_until: str | None
    pause_reason: str | None
    #: The pace this process keeps to: its slice of a known limit (null: none known).
    pace_requests_per_minute: float | None
    pace_tokens_per_minute: float | None
    #: This process's slice of the provider's limit (1 / processes pacing it).
    share: float
    in_flight: int
    consecutive_failures: int
    #: Its attempts in line (``starting``) and waiting for capacity, every process's.
    queued: int
    waiting: int


class Providers(Strict):
    """The configured providers."""

    providers: list[ProviderView]


class Me(Strict):
    """Whose key this is and what it may do."""

    owner: str
    scopes: list[str]


class Health(Strict):
    """The process is alive (``ok``)."""

    status: str


class Readiness(Strict):
    """The database answers (``ready``)."""

    status: str
    #: PostgreSQL: ``connected``, or ``down`` while the LISTEN relay reconnects (other
    #: processes' changes are then found by polling, about a second later); SQLite: null.
    listen: str | None
    #: Each provider's circuit (``closed``, ``open``, ``half_open``) and a pause it asked
    #: for: a detail for operators, not part of readiness (issue 43).
    providers: dict[str, dict[str, Any]]


RESPONSE_BODIES: tuple[type[msgspec.Struct], ...] = (
    JobView,
    AddedAttemptView,
    JobPage,
    JobEvents,
    AdminAttempts,
    Resolved,
    Contracts,
    Certifications,
    Providers,
    Me,
    Health,
    Readiness,
)
