"""The transition table and the R4 guard, as plain Python."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from gateway.domain.guards import blocking_attempt
from gateway.domain.records import AttemptRecord
from gateway.domain.states import (
    ATTEMPT_TRANSITIONS,
    TERMINAL_ATTEMPT_STATES,
    AttemptReason,
    AttemptState,
    JobStatus,
    can_move,
    job_status_for,
)


def attempt(state: AttemptState, n: int = 1) -> AttemptRecord:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    return AttemptRecord(
        id=f"att_{n}",
        job_id="job_1",
        number=n,
        provider="p",
        reason=AttemptReason.INITIAL,
        state=state,
        read_version=None,
        lease_owner=None,
        lease_expires_at=None,
        deadline_at=None,
        downstream_key=f"job_1/{n}",
        provider_request_id=None,
        error=None,
        created_at=now,
        started_at=None,
        finished_at=None,
    )


def test_terminal_states_have_no_way_out() -> None:
    for state in TERMINAL_ATTEMPT_STATES:
        assert ATTEMPT_TRANSITIONS[state] == frozenset()
        assert state.terminal


def test_a_timeout_is_never_a_failure_and_unknown_needs_resolution() -> None:
    assert can_move(AttemptState.RUNNING, AttemptState.UNKNOWN)
    assert not can_move(AttemptState.UNKNOWN, AttemptState.RUNNING)
    assert not can_move(AttemptState.UNKNOWN, AttemptState.STARTING)
    assert not can_move(AttemptState.STARTING, AttemptState.SUCCEEDED)


@given(st.lists(st.sampled_from(list(AttemptState)), max_size=6), st.booleans(), st.booleans())
def test_starting_or_unknown_always_blocks_a_new_attempt(
    states: list[AttemptState], hedge: bool, manual: bool
) -> None:
    attempts = [attempt(s, i) for i, s in enumerate(states)]
    blocker = blocking_attempt(attempts, allow_running=hedge, supersede_waiting=manual)
    if any(s in (AttemptState.STARTING, AttemptState.UNKNOWN) for s in states):
        assert blocker is not None and blocker.state.blocks_new_attempts
    elif AttemptState.WAITING in states and not manual:
        # Waiting for capacity blocks a failover and a hedge, never the client's button.
        assert blocker is not None and blocker.state is AttemptState.WAITING
    elif AttemptState.RUNNING in states and not hedge:
        assert blocker is not None and blocker.state is AttemptState.RUNNING
    else:
        assert blocker is None


def test_waiting_is_unsent_and_queued() -> None:
    assert AttemptState.WAITING.unsent and AttemptState.STARTING.unsent
    assert not AttemptState.WAITING.terminal
    assert not AttemptState.RUNNING.unsent
    assert job_status_for([AttemptState.FAILED, AttemptState.WAITING]) is JobStatus.QUEUED
    assert can_move(AttemptState.RUNNING, AttemptState.WAITING)
    assert can_move(AttemptState.WAITING, AttemptState.RUNNING)
    assert not can_move(AttemptState.WAITING, AttemptState.SUCCEEDED)  # it must run first


@given(st.lists(st.sampled_from(list(AttemptState)), min_size=1, max_size=6))
def test_job_status_follows_the_most_pressing_attempt(states: list[AttemptState]) -> None:
    status = job_status_for(states)
    if AttemptState.UNKNOWN in states:
        assert status is JobStatus.UNKNOWN
    elif all(s.terminal for s in states) and AttemptState.SUCCEEDED not in states:
        assert status is JobStatus.FAILED
    assert job_status_for(states, JobStatus.CANCELLED) is JobStatus.CANCELLED
