"""What the store hands back: plain, immutable records and business outcomes.

Outcomes (replayed, conflict, blocked, lost the race) are returned values, not exceptions.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from collections.abc import Callable
from typing import Any

from gateway.domain.states import AttemptReason, AttemptState, JobStatus


@dataclasses.dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One try at a job."""

    id: str
    job_id: str
    number: int
    provider: str
    reason: AttemptReason
    state: AttemptState
    read_version: int | None
    lease_owner: str | None
    lease_expires_at: dt.datetime | None
    deadline_at: dt.datetime | None
    downstream_key: str
    provider_request_id: str | None
    error: dict[str, Any] | None
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    #: What the reconciler last found asking the provider (None: never asked).
    reconciler: dict[str, Any] | None = None
    #: The model the provider reported for the answer (None: none, or not answered).
    reported_model: str | None = None
    #: Its place in the claim queue: for ``waiting``, the time before which it is not
    #: sent again; for ``starting``, when it was queued, later for an owner with many
    #: jobs queued so that other owners' jobs go between theirs (None: not queued).
    ready_at: dt.datetime | None = None
    #: How many times its provider said not now to it (its backoff's exponent).
    waits: int = 0
    #: Its job's owner: every statement about the attempt is routed by it (docs/scaling.md).
    owner_id: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class JobRecord:
    """The durable record of one user intention, with its attempts (oldest first)."""

    id: str
    owner_id: str
    idempotency_key: str
    fingerprint: str
    contract: str
    provider: str
    requested_provider: str | None
    input: Any
    status: JobStatus
    version: int
    completed_by: str | None
    result: Any
    error: dict[str, Any] | None
    created_at: dt.datetime
    updated_at: dt.datetime
    attempts: tuple[AttemptRecord, ...] = ()
    #: Past this time nothing more is sent for the job, and a job still waiting for
    #: capacity fails with ``job_deadline`` (None: no deadline, a job from before them).
    deadline_at: dt.datetime | None = None
    #: The W3C trace context it was created in (``NewJob.traceparent``), None: none.
    traceparent: str | None = None
    tracestate: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class EventRecord:
    """One line of a job's append-only audit trail."""

    id: int
    job_id: str
    attempt_id: str | None
    kind: str
    detail: dict[str, Any]
    at: dt.datetime


@dataclasses.dataclass(frozen=True, slots=True)
class NewJob:
    """What a client asked for, after authentication and validation."""

    owner_id: str
    idempotency_key: str
    fingerprint: str
    contract: str
    provider: str  #: the effective primary
    requested_provider: str | None  #: what the client named, if anything
    input: Any
    #: Seconds the job may take from its creation (the route's, or shorter if the client
    #: asked: not part of the fingerprint, a replay ignores it); None: no deadline.
    deadline_s: float | None = None
    #: Seconds after its creation its first attempt takes its place in the claim queue
    #: (its owner's fair share: ``gateway.service.fairness``); 0 for most jobs.
    queue_delay_s: float = 0.0
    #: The W3C trace context of the request that created it (``traceparent``, already
    #: checked, and its ``tracestate``): stored with the job, not part of the fingerprint.
    traceparent: str | None = None
    tracestate: str | None = None


class CreateOutcome(enum.StrEnum):
    """How a job creation ended."""

    #: A new job and its first attempt were inserted.
    CREATED = "created"
    #: The key was used before with the same fingerprint: the existing job.
    REPLAYED = "replayed"
    #: The key was used before with a different fingerprint: nothing changed.
    CONFLICT = "conflict"


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimedAttempt:
    """An attempt a runner now owns (state ``running``, lease held)."""

    attempt: AttemptRecord
    job: JobRecord  #: without attempts


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimSpec:
    """Claim the new job's first attempt in the creating transaction (DESIGN R7).

    The attempt is inserted ``running`` with this worker's lease, like any claim, so a
    crash of the creating process still ends as ``unknown`` through the reaper.
    """

    worker_id: str
    lease_ttl: float  #: seconds
    deadline_s: float  #: seconds the provider call may take
    #: Work the store may run while the creating statement is on the wire and the
    #: process has nothing else to do (the runner renders the call's prompt): CPU only,
    #: no I/O, never raises. Run or not, the attempt is the same; it only saves time.
    meanwhile: Callable[[], None] | None = dataclasses.field(
        default=None, compare=False, repr=False
    )


@dataclasses.dataclass(frozen=True, slots=True)
class CreateResult:
    """The outcome of ``create_or_get`` and the job it concerns."""

    outcome: CreateOutcome
    job: JobRecord
    #: The first attempt, claimed in the creating transaction (only when asked and created).
    claimed: ClaimedAttempt | None = None


class AddAttemptOutcome(enum.StrEnum):
    """How a request for a new attempt ended."""

    #: The attempt was inserted.
    ADDED = "added"
    #: An attempt is starting, running or unknown (R4); see ``blocking``.
    BLOCKED = "blocked"
    #: The job is succeeded or cancelled.
    CLOSED = "closed"
    #: No such job (for this owner).
    NOT_FOUND = "not_found"


@dataclasses.dataclass(frozen=True, slots=True)
class AddAttemptResult:
    """The outcome of ``add_attempt``."""

    outcome: AddAttemptOutcome
    attempt: AttemptRecord | None = None
    blocking: AttemptRecord | None = None
    job: JobRecord | None = None


class FinalizeOutcome(enum.StrEnum):
    """How a finished attempt's compare-and-swap ended."""

    #: This attempt's result is the job's result.
    WON = "won"
    #: Another attempt (or a cancel) decided first; the payload was dropped.
    LOST = "lost"
    #: The attempt was not in a state that may finish (e.g. already unknown).
    STALE = "stale"


@dataclasses.dataclass(frozen=True, slots=True)
class FinalizeResult:
    """The outcome of ``finalize``."""

    outcome: FinalizeOutcome
    attempt_id: str
    winner: str | None = None  #: the attempt that won (``None`` when a cancel decided)
    job_status: JobStatus | None = None
    #: The job as the deciding transaction left it, with its attempts (``None`` when stale).
    job: JobRecord | None = None


class TransitionOutcome(enum.StrEnum):
    """How a guarded transition (cancel, resolve, fail, mark unknown) ended."""

    #: The conditional UPDATE moved one row.
    DONE = "done"
    #: Zero rows: someone else moved it first, or it was never in the expected state.
    CONFLICT = "conflict"
    #: No such job or attempt (for this owner).
    NOT_FOUND = "not_found"


@dataclasses.dataclass(frozen=True, slots=True)
class TransitionResult:
    """The outcome of a guarded transition, with the record as it now stands."""

    outcome: TransitionOutcome
    job: JobRecord | None = None
    attempt: AttemptRecord | None = None
    detail: str = ""
    added: AttemptRecord | None = None  #: a failover attempt created in the same transaction


@dataclasses.dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller."""

    key_id: str
    owner_id: str
    scopes: frozenset[str]

    @property
    def is_admin(self) -> bool:
        """Say whether the caller may use admin routes."""
        return "admin" in self.scopes
