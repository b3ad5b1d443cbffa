"""Typed answers: the job, its attempts, and what a creation or a fallback press gave."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any


class JobStatus(str, enum.Enum):
    """Where a job stands."""

    #: created, and no attempt is in flight: one is about to start, or waits for its
    #: provider's capacity (``Job.waiting`` says why and until when)
    QUEUED = "queued"
    RUNNING = "running"  #: an attempt is in flight
    #: an attempt's outcome is not known (a timeout, a dropped connection): it may still
    #: finish at the provider, so nothing new starts until it is resolved out of band
    UNKNOWN = "unknown"
    SUCCEEDED = "succeeded"  #: decided: ``result`` holds the answer
    FAILED = "failed"  #: decided: no attempt succeeded (a manual attempt may reopen it)
    CANCELLED = "cancelled"  #: decided: cancelled


#: ``error.reason`` of a job that failed because its deadline passed while it waited.
JOB_DEADLINE = "job_deadline"
#: The statuses ``Prefer: wait`` and ``wait`` stop at: nothing will change on its own.
SETTLED = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.UNKNOWN})
#: The statuses the event stream ends at: decided (``unknown`` may still be resolved).
DECIDED = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})


class AttemptState(str, enum.Enum):
    """Where one try at the job stands."""

    STARTING = "starting"  #: created; may be about to call the provider
    RUNNING = "running"  #: the provider call is in flight
    SUCCEEDED = "succeeded"  #: won: its result is the job's
    LOST = "lost"  #: finished after another attempt won; its result was dropped
    FAILED = "failed"  #: definitely did not do the work
    CANCELLED = "cancelled"  #: resolved as cancelled
    UNKNOWN = "unknown"  #: may or may not have done the work; blocks new attempts
    #: its provider said not now (a rate limit, an overload) before doing anything: sent
    #: again, under the same key, no earlier than ``ready_at``; nothing of it is in flight,
    #: so the fallback button supersedes it (it becomes ``cancelled``, ``superseded``)
    WAITING = "waiting"


#: Attempt states that block a new attempt (R4). A ``waiting`` attempt does not: a manual
#: attempt supersedes it.
IN_PROGRESS = frozenset({AttemptState.STARTING, AttemptState.RUNNING, AttemptState.UNKNOWN})


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One try at fulfilling the job (the first call, a failover, a manual retry)."""

    id: str
    number: int
    provider: str
    reason: str  #: ``initial``, ``failover``, ``hedge`` or ``manual``
    state: AttemptState
    error: dict[str, Any] | None
    started_at: str | None
    finished_at: str | None
    #: a ``waiting`` attempt is not sent again before this time (RFC 3339 UTC); else None
    ready_at: str | None = None
    waits: int = 0  #: how many times its provider said not now to it (each a wait)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Attempt:
        return cls(
            id=data["id"],
            number=int(data["number"]),
            provider=data["provider"],
            reason=data["reason"],
            state=AttemptState(data["state"]),
            error=data.get("error"),
            started_at=data.get("started_at"),
            finished_at=data.get("finished_at"),
            ready_at=data.get("ready_at"),
            waits=int(data.get("waits") or 0),
        )


@dataclasses.dataclass(frozen=True)
class CapacityWait:
    """Why a queued job waits for its provider's capacity, and until when.

    Not a failure: the provider said not now (or the gateway knows it would), nothing was
    done, and the same attempt is sent again once ``until`` has passed, unless the job's
    deadline comes first (then the job fails with ``job_deadline``).
    """

    attempt_id: str  #: the waiting attempt
    provider: str
    #: ``rate_limited`` or ``overloaded`` (the provider said so), or why the gateway did not
    #: send it: ``paced``, ``paused``, ``circuit_open``, ``concurrency``
    reason: str
    until: str | None  #: not sent again before this time (RFC 3339 UTC)
    waits: int  #: how many times its provider said not now to it

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CapacityWait:
        return cls(
            attempt_id=data["attempt_id"],
            provider=data["provider"],
            reason=str(data.get("reason") or ""),
            until=data.get("until"),
            waits=int(data.get("waits") or 0),
        )


@dataclasses.dataclass(frozen=True)
class Job:
    """The durable record of one intention, with its attempts."""

    id: str
    idempotency_key: str
    contract: str
    provider: str
    status: JobStatus
    version: int
    completed_by: str | None
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    attempts: tuple[Attempt, ...]
    raw: dict[str, Any] = dataclasses.field(repr=False, compare=False)  #: the whole body
    #: nothing is sent for the job after this time (RFC 3339 UTC); None from a gateway
    #: older than deadlines
    deadline_at: str | None = None
    #: set while the job waits for its provider's capacity: why, and until when
    waiting: CapacityWait | None = None
    #: the W3C trace context it was created in (``traceparent``, ``trace_id``,
    #: ``tracestate``); None: none, or a gateway older than tracing
    trace: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Job:
        waiting = data.get("waiting")
        return cls(
            id=data["id"],
            idempotency_key=data["idempotency_key"],
            contract=data["contract"],
            provider=data["provider"],
            status=JobStatus(data["status"]),
            version=int(data["version"]),
            completed_by=data.get("completed_by"),
            result=data.get("result"),
            error=data.get("error"),
            attempts=tuple(Attempt.from_json(a) for a in data.get("attempts") or []),
            raw=data,
            deadline_at=data.get("deadline_at"),
            waiting=CapacityWait.from_json(waiting) if isinstance(waiting, dict) else None,
            trace=data.get("trace") if isinstance(data.get("trace"), dict) else None,
        )

    @property
    def settled(self) -> bool:
        """Say whether nothing will change without someone acting (decided, or unknown)."""
        return self.status in SETTLED

    @property
    def decided(self) -> bool:
        """Say whether the job is succeeded, failed or cancelled (``unknown`` is not)."""
        return self.status in DECIDED

    @property
    def blocking_attempt(self) -> Attempt | None:
        """Return the attempt that blocks a new one (starting, running or unknown)."""
        return next((a for a in self.attempts if a.state in IN_PROGRESS), None)

    @property
    def failure_reason(self) -> str | None:
        """Return why a failed job failed (its ``error.reason``); None unless ``failed``."""
        if self.status is not JobStatus.FAILED or not isinstance(self.error, dict):
            return None
        reason = self.error.get("reason")
        return str(reason) if reason is not None else None

    @property
    def deadline_passed(self) -> bool:
        """Say whether the job failed because its deadline passed before a provider could
        take it (``job_deadline``), rather than because a provider failed it."""
        return self.failure_reason == JOB_DEADLINE


def is_settled(job: Job) -> bool:
    """Say whether nothing will change on ``job`` without someone acting (``wait``'s default)."""
    return job.settled


def is_decided(job: Job) -> bool:
    """Say whether ``job`` is decided (``until=is_decided`` follows an unknown job)."""
    return job.decided


@dataclasses.dataclass(frozen=True)
class Created:
    """What ``create_job`` got: the job, and whether the key had already made it."""

    job: Job
    #: ``Idempotent-Replayed: true``: this key had already made this job (an earlier
    #: try's answer was lost, or the intention was sent again); not a new job
    replayed: bool
    status_code: int  #: 201 (new) or 200 (replayed)
    tries: int  #: requests sent for this call, all with the same key and body


@dataclasses.dataclass(frozen=True)
class AttemptAdded:
    """The fallback button worked: a manual attempt was accepted and will run."""

    job: Job
    attempt_id: str


@dataclasses.dataclass(frozen=True)
class StillInProgress:
    """The fallback button was refused because an attempt is still in progress: wait.

    Pressing again changes nothing until ``attempt_id`` finishes; an ``unknown`` attempt
    waits for an operator (or the reconciler) to resolve it, because it may still finish
    at the provider, and a second call could do the work twice.
    """

    job_id: str
    attempt_id: str
    attempt_state: AttemptState
    detail: str


FallbackOutcome = AttemptAdded | StillInProgress
