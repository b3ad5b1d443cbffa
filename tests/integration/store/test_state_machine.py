"""Hypothesis drives random operation sequences against the real store (SQLite): clicks,
claims, answers, failures, timeouts, waits for capacity, deadlines, cancels, resolutions.

Invariants after every step: at most one attempt ever succeeds per job, the job's result
is the winner's, every observed attempt change is in the transition table, the version
never goes back, and a decided job stays decided.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from gateway.domain.clock import ManualClock
from gateway.domain.fingerprint import fingerprint
from gateway.domain.records import NewJob
from gateway.domain.states import (
    AttemptReason,
    AttemptState,
    JobStatus,
    can_move,
    job_status_for,
)
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import SqlJobStore, open_store

TEMPLATE: Path | None = None


def new_job(key: str) -> NewJob:
    return NewJob("alice", key, fingerprint("c@1", {}, None), "c@1", "a", None, {}, deadline_s=20.0)


_keys = itertools.count()


class JobLifecycle(RuleBasedStateMachine):
    """Random clicks, claims, finishes, failures, timeouts, cancels and resolutions."""

    def __init__(self) -> None:
        super().__init__()
        assert TEMPLATE is not None
        self.dir = Path(tempfile.mkdtemp())
        shutil.copyfile(TEMPLATE, self.dir / "db.sqlite")
        self.loop = asyncio.new_event_loop()
        self.clock = ManualClock()
        self.store: SqlJobStore = self.run(
            open_store(
                f"sqlite+aiosqlite:///{self.dir / 'db.sqlite'}",
                clock=self.clock,
                shortcuts=ShortcutsConfig.from_env(),
                database=DatabaseConfig.from_env(),
            )
        )
        self.job_id = ""
        self.seen: dict[str, AttemptState] = {}
        self.version = 0
        self.decided: JobStatus | None = None

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(self.store.close())
        self.loop.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def attempt_ids(self, *states: AttemptState) -> list[str]:
        return [a for a, s in self.seen.items() if s in states]

    @initialize()
    def create(self) -> None:
        self.job_id = self.run(self.store.create_or_get(new_job(key=f"k{next(_keys)}"))).job.id

    @rule(provider=st.sampled_from(["a", "b"]), hedge=st.booleans())
    def add(self, provider: str, hedge: bool) -> None:
        reason = AttemptReason.HEDGE if hedge else AttemptReason.MANUAL
        self.run(self.store.add_attempt(self.job_id, provider, reason, allow_running=hedge))

    @rule()
    def claim(self) -> None:
        self.run(
            self.store.claim_next_attempt("w", lease_ttl=5, deadline_s={}, default_deadline_s=5)
        )

    @rule(pick=st.integers(0, 5), value=st.integers(0, 100))
    def finish(self, pick: int, value: int) -> None:
        ids = self.attempt_ids(AttemptState.RUNNING)
        if ids:
            self.run(self.store.finalize(ids[pick % len(ids)], {"v": value}))

    @rule(pick=st.integers(0, 5), failover=st.booleans())
    def fail(self, pick: int, failover: bool) -> None:
        ids = self.attempt_ids(AttemptState.RUNNING, AttemptState.STARTING)
        if ids:
            self.run(
                self.store.fail_attempt(
                    ids[pick % len(ids)], {"reason": "x"}, next_provider="b" if failover else None
                )
            )

    @rule(pick=st.integers(0, 5), seconds=st.sampled_from([0.0, 2.0, 30.0]))
    def not_now(self, pick: int, seconds: float) -> None:
        """The provider said not now: the attempt waits (issue 43)."""
        ids = self.attempt_ids(AttemptState.RUNNING)
        if ids:
            ready = self.clock.now() + dt.timedelta(seconds=seconds)
            self.run(
                self.store.wait_attempt(
                    ids[pick % len(ids)], "w", ready_at=ready, error={"reason": "status_429"}
                )
            )

    @rule()
    def expire(self) -> None:
        """The reaper fails jobs whose deadline passed while they waited."""
        self.run(self.store.expire_overdue())

    @rule(pick=st.integers(0, 5))
    def time_out(self, pick: int) -> None:
        ids = self.attempt_ids(AttemptState.RUNNING)
        if ids:
            self.run(self.store.mark_unknown(ids[pick % len(ids)], {"reason": "timeout"}))

    @rule(seconds=st.sampled_from([1.0, 6.0]))
    def crash_clock(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.run(self.store.reap_expired_leases())

    @rule()
    def cancel(self) -> None:
        self.run(self.store.cancel(self.job_id))

    @rule(
        pick=st.integers(0, 5),
        outcome=st.sampled_from(
            [AttemptState.FAILED, AttemptState.CANCELLED, AttemptState.SUCCEEDED]
        ),
    )
    def resolve(self, pick: int, outcome: AttemptState) -> None:
        ids = self.attempt_ids(AttemptState.UNKNOWN)
        if ids:
            self.run(self.store.resolve(ids[pick % len(ids)], outcome, result={"r": 1}))

    @invariant()
    def consistent(self) -> None:
        if not self.job_id:
            return
        job = self.run(self.store.get_job(self.job_id))
        winners = [a for a in job.attempts if a.state is AttemptState.SUCCEEDED]
        assert len(winners) <= 1
        if winners:
            assert job.completed_by == winners[0].id
            assert job.status is JobStatus.SUCCEEDED
        assert (job.completed_by is None) == (not winners)
        for a in job.attempts:
            before = self.seen.get(a.id)
            if before is not None and before is not a.state:
                assert can_move(before, a.state), f"{before} -> {a.state}"
            self.seen[a.id] = a.state
        # The status the SQL derived (statements.derived_status and the transitions) is
        # the one the domain's rule gives for these attempts, on every state reached.
        decided = job.status if job.status.decided else None
        expected = job_status_for([a.state for a in job.attempts], decided)
        assert job.status is expected, f"{job.status} for {[a.state for a in job.attempts]}"
        assert job.version >= self.version
        self.version = job.version
        if self.decided is not None:
            assert job.status is self.decided
        if job.status.decided:
            self.decided = job.status


@pytest.mark.slow
def test_no_operation_sequence_breaks_the_job_invariants(sqlite_template: Path) -> None:
    global TEMPLATE
    TEMPLATE = sqlite_template
    runner = JobLifecycle.TestCase
    runner.settings = settings(
        max_examples=30,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    runner().runTest()
