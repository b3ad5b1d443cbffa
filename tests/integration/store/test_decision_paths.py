"""R5's winning decision is one specification, whichever path runs it (issue 44).

A running attempt's answer is decided alone in one round trip (``finalize``: PostgreSQL's
one statement, SQLite's statements in a write transaction of their own) or, when that did
not win, inside a transaction holding the job's lock (``Finalizing._decide``). Both run
the same per-database piece. Hypothesis builds a job through random operations (hedges,
failovers, waits for capacity, timeouts, the reaper, cancels, resolutions), then decides
one of its attempts by each path on a fresh copy of the same history: the two jobs, their
attempts and their events must be the same, and both what one model says (won, lost, or
stale, and what becomes of the siblings). On SQLite and PostgreSQL, shortcuts on and off.

Then concurrent pairs, where the paths race: a hedge against its primary, a cancel
against a decision, the reaper against a late answer: one of the two orders, never a mix.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.domain.clock import ManualClock
from gateway.domain.fingerprint import fingerprint
from gateway.domain.records import FinalizeOutcome, JobRecord, NewJob
from gateway.domain.states import UNSENT_STATES, AttemptReason, AttemptState, JobStatus
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import SqlJobStore, open_store

A = AttemptState
UNSENT = set(UNSENT_STATES)  # starting (not yet claimed) and waiting
_keys = itertools.count()
TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")
#: Histories per database and shortcut setting (each decided both ways), the same ones on
#: every run; ``ONEJOB_PROPERTY_EXAMPLES=2000`` draws that many new ones instead.
EXAMPLES = int(os.environ.get("ONEJOB_PROPERTY_EXAMPLES", "0")) or 60
DERANDOMIZE = "ONEJOB_PROPERTY_EXAMPLES" not in os.environ

# One operation on the job: (name, pick), the pick choosing among candidates.
OPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                *("add", "hedge", "claim", "fail", "failover", "wait", "timeout", "reap"),
                *("cancel", "resolve_failed", "resolve_succeeded", "finish"),
            ]
        ),
        st.integers(0, 5),
    ),
    max_size=12,
)


def new_job() -> NewJob:
    key = f"paths-{next(_keys)}"
    return NewJob("alice", key, fingerprint("c@1", {}, None), "c@1", "a", None, {}, deadline_s=60.0)


def ids_in(job: JobRecord, *states: AttemptState) -> list[str]:
    return [a.id for a in job.attempts if a.state in states]


async def apply(store: SqlJobStore, clock: ManualClock, job_id: str, op: str, pick: int) -> None:
    """Run one operation of a history on ``job_id`` (nothing when it has no candidate)."""
    job = await store.get_job(job_id)
    assert job is not None

    def one(*states: AttemptState) -> str | None:
        ids = ids_in(job, *states)
        return ids[pick % len(ids)] if ids else None

    if op in ("add", "hedge"):
        reason = AttemptReason.HEDGE if op == "hedge" else AttemptReason.MANUAL
        await store.add_attempt(job_id, "b", reason, allow_running=op == "hedge")
    elif op == "claim":
        await store.claim_next_attempt("w", lease_ttl=5, deadline_s={}, default_deadline_s=5)
    elif op in ("fail", "failover") and (target := one(A.RUNNING, A.STARTING)):
        failover = "b" if op == "failover" else None
        await store.fail_attempt(target, {"reason": "x"}, next_provider=failover)
    elif op == "wait" and (target := one(A.RUNNING)):
        await store.wait_attempt(target, "w", ready_at=clock.now(), error={"reason": "status_429"})
    elif op == "timeout" and (target := one(A.RUNNING)):
        await store.mark_unknown(target, {"reason": "timeout"})
    elif op == "reap":
        clock.advance(6.0)
        await store.reap_expired_leases()
    elif op == "cancel":
        await store.cancel(job_id)
    elif op.startswith("resolve_") and (target := one(A.UNKNOWN)):
        outcome = A.FAILED if op == "resolve_failed" else A.SUCCEEDED
        await store.resolve(target, outcome, result={"resolved": True})
    elif op == "finish" and (target := one(A.RUNNING)):
        await store.finalize(target, {"earlier": pick})


def seen(job: JobRecord, events: list[Any]) -> dict[str, Any]:
    """The job as compared across paths: ids by attempt number, no timestamps."""
    number = {a.id: f"#{a.number}" for a in job.attempts}

    def named(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: named(v) for k, v in value.items()}
        if isinstance(value, list):
            return [named(v) for v in value]
        if isinstance(value, str) and TIMESTAMP.match(value):
            return "<time>"  # the two histories ran at different times
        return number.get(value, value) if isinstance(value, str) else value

    return {
        "status": job.status,
        "result": job.result,
        "version": job.version,
        "completed_by": number.get(job.completed_by or ""),
        "attempts": [
            (a.number, a.state, a.reason, a.provider, named(a.error)) for a in job.attempts
        ],
        "events": [(e.kind, number.get(e.attempt_id or ""), named(e.detail)) for e in events],
    }


def expected(before: JobRecord, target: str) -> FinalizeOutcome:
    """The model: R5's compare-and-swap on the job as it stood."""
    attempt = next(a for a in before.attempts if a.id == target)
    if attempt.state is not A.RUNNING:
        return FinalizeOutcome.STALE
    can_swap = before.completed_by is None and before.version == attempt.read_version
    return FinalizeOutcome.WON if can_swap else FinalizeOutcome.LOST


def check_model(before: JobRecord, after: JobRecord, target: str, outcome: Any) -> None:
    assert outcome is expected(before, target), (before, outcome)
    was = {a.id: a.state for a in before.attempts}
    now = {a.id: a.state for a in after.attempts}
    if outcome is FinalizeOutcome.WON:
        assert after.status is JobStatus.SUCCEEDED and after.completed_by == target
        assert after.result == {"answer": 1} and after.version == before.version + 1
        for attempt_id, state in was.items():
            becomes = A.SUCCEEDED if attempt_id == target else state
            becomes = A.CANCELLED if state in UNSENT else becomes
            assert now[attempt_id] is becomes, (attempt_id, state, now[attempt_id])
    elif outcome is FinalizeOutcome.LOST:
        assert now == {**was, target: A.LOST}
        assert (after.completed_by, after.result) == (before.completed_by, before.result)
    else:
        assert (now, after.version) == (was, before.version)


Decide = Callable[[SqlJobStore, str], Awaitable[Any]]


async def alone(store: SqlJobStore, attempt_id: str) -> Any:
    return (await store.finalize(attempt_id, {"answer": 1})).outcome


async def locked(store: SqlJobStore, attempt_id: str) -> Any:
    return (await store._decide(attempt_id, {"answer": 1}, None, None)).outcome


async def decided_by(
    store: SqlJobStore, clock: ManualClock, history: list[tuple[str, int]], pick: int, path: Decide
) -> tuple[dict[str, Any], Any]:
    """Build the history on a new job, decide one of its attempts by ``path``."""
    job_id = (await store.create_or_get(new_job())).job.id
    for op, op_pick in [("claim", 0), *history]:  # the first attempt runs, mostly
        await apply(store, clock, job_id, op, op_pick)
    before = await store.get_job(job_id)
    assert before is not None
    # An even pick decides a running attempt, when there is one; an odd one any attempt.
    running = ids_in(before, A.RUNNING)
    anyone = [a.id for a in before.attempts]
    candidates = running if running and pick % 2 == 0 else anyone
    target = candidates[pick // 2 % len(candidates)]
    outcome = await path(store, target)
    after = await store.get_job(job_id)
    assert after is not None
    check_model(before, after, target, outcome)
    seen_after = seen(after, await store.events(job_id))
    # Claims take the head of the store's whole queue: leave no attempt of this job there.
    await store.cancel(job_id)
    return seen_after, outcome


@pytest.fixture(params=["on", "off"])
def shortcuts(request: pytest.FixtureRequest) -> ShortcutsConfig:
    return ShortcutsConfig() if request.param == "on" else ShortcutsConfig.all_off()


@pytest.mark.slow
def test_every_path_of_the_winning_decision_is_the_same_decision(
    database_url: str, shortcuts: ShortcutsConfig
) -> None:
    loop = asyncio.new_event_loop()
    clock = ManualClock()
    store = loop.run_until_complete(
        open_store(
            database_url, clock=clock, shortcuts=shortcuts, database=DatabaseConfig.from_env()
        )
    )
    outcomes: set[Any] = set()

    @settings(
        max_examples=EXAMPLES,
        derandomize=DERANDOMIZE,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(history=OPS, pick=st.integers(0, 11))
    @example(history=[], pick=0)  # won
    @example(history=[("timeout", 0)], pick=1)  # stale: the attempt is unknown
    @example(history=[("hedge", 0), ("claim", 0), ("finish", 0)], pick=0)  # lost to #1
    def both_paths(history: list[tuple[str, int]], pick: int) -> None:
        first, won_alone = loop.run_until_complete(decided_by(store, clock, history, pick, alone))
        second, won_locked = loop.run_until_complete(
            decided_by(store, clock, history, pick, locked)
        )
        assert won_alone is won_locked
        assert first == second
        outcomes.add(won_alone)

    try:
        both_paths()
    finally:
        loop.run_until_complete(store.close())
        loop.close()
    # The histories reached every outcome, or the comparison proved little.
    assert outcomes == {FinalizeOutcome.WON, FinalizeOutcome.LOST, FinalizeOutcome.STALE}


# -- concurrent pairs --------------------------------------------------------------------------


async def running_pair(store: SqlJobStore) -> tuple[str, str, str]:
    """A job whose primary runs and whose hedge was claimed: (job, primary, hedge)."""
    job_id = (await store.create_or_get(new_job())).job.id
    await store.claim_next_attempt("w", lease_ttl=5, deadline_s={}, default_deadline_s=5)
    await store.add_attempt(job_id, "b", AttemptReason.HEDGE, allow_running=True)
    await store.claim_next_attempt("w", lease_ttl=5, deadline_s={}, default_deadline_s=5)
    job = await store.get_job(job_id)
    assert job is not None
    primary, hedge = ids_in(job, A.RUNNING)
    return job_id, primary, hedge


PAIRS = list(itertools.product([alone, locked], repeat=2))


@pytest.mark.parametrize(("first", "second"), PAIRS, ids=lambda p: p.__name__)
async def test_a_hedge_and_its_primary_answering_together_make_one_winner(
    store: SqlJobStore, first: Decide, second: Decide
) -> None:
    for _ in range(10):
        job_id, primary, hedge = await running_pair(store)
        outcomes = await asyncio.gather(first(store, primary), second(store, hedge))
        assert sorted(outcomes) == sorted([FinalizeOutcome.WON, FinalizeOutcome.LOST])
        job = await store.get_job(job_id)
        assert job is not None
        winner = primary if outcomes[0] is FinalizeOutcome.WON else hedge
        assert job.completed_by == winner and job.status is JobStatus.SUCCEEDED
        kinds = [e.kind for e in await store.events(job_id)]
        assert kinds.count("attempt_succeeded") == 1 and kinds.count("race_lost") == 1


@pytest.mark.parametrize("path", [alone, locked], ids=lambda p: p.__name__)
async def test_a_cancel_against_a_decision_is_one_or_the_other(
    store: SqlJobStore, path: Decide
) -> None:
    for _ in range(10):
        job_id, primary, _hedge = await running_pair(store)
        outcome, _ = await asyncio.gather(path(store, primary), store.cancel(job_id))
        job = await store.get_job(job_id)
        assert job is not None
        if outcome is FinalizeOutcome.WON:
            assert job.status is JobStatus.SUCCEEDED and job.completed_by == primary
        else:  # the cancel came first: the answer lost to it, nothing written
            assert outcome is FinalizeOutcome.LOST, outcome
            assert job.status is JobStatus.CANCELLED and job.result is None
        states = {a.id: a.state for a in job.attempts}
        assert states[primary] in (A.SUCCEEDED, A.LOST)


@pytest.mark.parametrize("path", [alone, locked], ids=lambda p: p.__name__)
async def test_the_reaper_against_a_late_answer_is_one_or_the_other(
    database_url: str, path: Decide
) -> None:
    clock = ManualClock()
    store = await open_store(
        database_url,
        clock=clock,
        shortcuts=ShortcutsConfig.from_env(),
        database=DatabaseConfig.from_env(),
    )
    try:
        for _ in range(10):
            job_id, primary, hedge = await running_pair(store)
            clock.advance(6.0)  # both leases expired: the reaper may take them
            outcome, reaped = await asyncio.gather(
                path(store, primary), store.reap_expired_leases()
            )
            job = await store.get_job(job_id)
            assert job is not None
            states = {a.id: a.state for a in job.attempts}
            if outcome is FinalizeOutcome.WON:  # the answer first: the reaper found it decided
                assert states[primary] is A.SUCCEEDED and job.status is JobStatus.SUCCEEDED
                assert primary not in {a.id for a in reaped}
            else:  # the reaper first: the attempt is unknown, its late answer stale
                assert outcome is FinalizeOutcome.STALE, outcome
                assert states[primary] is A.UNKNOWN and job.completed_by is None
            assert states[hedge] in (A.UNKNOWN, A.RUNNING)
    finally:
        await store.close()
