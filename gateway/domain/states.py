"""Job and attempt state machines (DESIGN R3-R5): the allowed transitions, in one place.

Plain Python: no framework, no database. The store turns each transition into a
conditional ``UPDATE ... WHERE state = :expected`` and checks the rowcount.
"""

from __future__ import annotations

import enum


class AttemptState(enum.StrEnum):
    """Where one try at a job stands."""

    #: Created; a runner may be about to call the provider.
    STARTING = "starting"
    #: Request in flight, within its deadline, a runner holds the lease.
    RUNNING = "running"
    #: Won the compare-and-swap: its result is the job's result.
    SUCCEEDED = "succeeded"
    #: Finished, but another attempt had already won or the job was cancelled.
    LOST = "lost"
    #: Definite failure: the provider did not do the work, or broke the contract.
    FAILED = "failed"
    #: Resolved out of band (job cancelled before the call, or an admin decision).
    CANCELLED = "cancelled"
    #: Outcome not known (timeout, broken connection, 502/504, lease expired).
    UNKNOWN = "unknown"
    #: Not in flight: the provider said not now (a rate limit, an overload) before doing
    #: anything, or its capacity was known to be spent; sent again no earlier than its
    #: ``ready_at``, holding no runner and no lease meanwhile (issue 43).
    WAITING = "waiting"

    @property
    def terminal(self) -> bool:
        """Say whether no transition leaves this state."""
        return self in TERMINAL_ATTEMPT_STATES

    @property
    def blocks_new_attempts(self) -> bool:
        """Say whether this state forbids any new attempt on the job (R4).

        ``waiting`` forbids the automatic ones (a failover, a hedge), but a manual attempt
        supersedes it: nothing of it is in flight (``guards.blocking_attempt``).
        """
        return self in (AttemptState.STARTING, AttemptState.UNKNOWN)

    @property
    def unsent(self) -> bool:
        """Say whether nothing of this attempt is in flight and it may still be sent: a
        decided job cancels it (``UNSENT_STATES``)."""
        return self in UNSENT_STATES


TERMINAL_ATTEMPT_STATES = frozenset(
    {AttemptState.SUCCEEDED, AttemptState.LOST, AttemptState.FAILED, AttemptState.CANCELLED}
)
#: Attempts that may still be sent and have nothing in flight: queued (``starting``) or
#: waiting for capacity. A runner claims them; a job's decision cancels them. Every store
#: statement that claims or cancels unsent attempts names these (``store.rows.UNSENT``).
UNSENT_STATES = (AttemptState.STARTING, AttemptState.WAITING)

#: Every allowed attempt transition: from-state -> the states it may move to.
ATTEMPT_TRANSITIONS: dict[AttemptState, frozenset[AttemptState]] = {
    AttemptState.STARTING: frozenset(
        {
            AttemptState.RUNNING,
            AttemptState.CANCELLED,  # the job was cancelled before anything was sent
            AttemptState.FAILED,  # could not even be sent (e.g. provider not configured)
            AttemptState.UNKNOWN,
        }
    ),
    AttemptState.RUNNING: frozenset(
        {
            AttemptState.SUCCEEDED,
            AttemptState.LOST,
            AttemptState.FAILED,
            AttemptState.UNKNOWN,
            # The provider said not now before doing anything: it waits, to be sent again.
            AttemptState.WAITING,
        }
    ),
    AttemptState.WAITING: frozenset(
        {
            AttemptState.RUNNING,  # claimed again once its ``ready_at`` passed
            AttemptState.CANCELLED,  # the job was decided or cancelled, or superseded
            AttemptState.FAILED,  # the job's deadline passed while it waited
        }
    ),
    # Only out-of-band resolution leaves `unknown`; `succeeded` still goes through R5.
    AttemptState.UNKNOWN: frozenset(
        {AttemptState.SUCCEEDED, AttemptState.LOST, AttemptState.FAILED, AttemptState.CANCELLED}
    ),
    AttemptState.SUCCEEDED: frozenset(),
    AttemptState.LOST: frozenset(),
    AttemptState.FAILED: frozenset(),
    AttemptState.CANCELLED: frozenset(),
}


def can_move(current: AttemptState, target: AttemptState) -> bool:
    """Say whether an attempt may move from ``current`` to ``target``."""
    return target in ATTEMPT_TRANSITIONS[current]


def sources_of(target: AttemptState) -> frozenset[AttemptState]:
    """Return the states from which an attempt may move to ``target``."""
    return frozenset(s for s, targets in ATTEMPT_TRANSITIONS.items() if target in targets)


class JobStatus(enum.StrEnum):
    """Where the user's intention stands, summed over its attempts."""

    #: An attempt is waiting to be claimed, or waiting for its provider's capacity.
    QUEUED = "queued"
    #: An attempt is in flight.
    RUNNING = "running"
    #: An attempt's outcome is unknown; nothing happens until it is resolved.
    UNKNOWN = "unknown"
    #: One attempt won; ``result`` and ``completed_by`` are set.
    SUCCEEDED = "succeeded"
    #: Every attempt failed definitely and no fallback is left.
    FAILED = "failed"
    #: The owner cancelled it; late results lose.
    CANCELLED = "cancelled"

    @property
    def decided(self) -> bool:
        """Say whether the job is closed for good (no attempt can change it)."""
        return self in (JobStatus.SUCCEEDED, JobStatus.CANCELLED)

    @property
    def settled(self) -> bool:
        """Say whether a waiting client should be answered now (``Prefer: wait``)."""
        return self in (
            JobStatus.SUCCEEDED,
            JobStatus.FAILED,
            JobStatus.CANCELLED,
            JobStatus.UNKNOWN,
        )


class AttemptReason(enum.StrEnum):
    """Why an attempt was created."""

    #: The first attempt, made with the job.
    INITIAL = "initial"
    #: After a definite failure, on the next certified fallback.
    FAILOVER = "failover"
    #: Raced against a slow running attempt (hedgeable contracts only).
    HEDGE = "hedge"
    #: Asked for by the client (the "fallback button") or an admin.
    MANUAL = "manual"


def job_status_for(states: list[AttemptState], decided: JobStatus | None = None) -> JobStatus:
    """Derive the job's status from its attempts, unless a decision already closed it."""
    if decided is not None and decided.decided:
        return decided
    if AttemptState.UNKNOWN in states:
        return JobStatus.UNKNOWN
    if AttemptState.RUNNING in states:
        return JobStatus.RUNNING
    if AttemptState.STARTING in states or AttemptState.WAITING in states:
        return JobStatus.QUEUED
    if AttemptState.SUCCEEDED in states:
        return JobStatus.SUCCEEDED
    return JobStatus.FAILED
