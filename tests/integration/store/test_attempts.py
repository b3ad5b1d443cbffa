"""R3-R5 at the store: guarded transitions, compare-and-swap, cancel races, leases."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.domain.clock import ManualClock
from gateway.domain.records import (
    AddAttemptOutcome,
    ClaimedAttempt,
    FinalizeOutcome,
    TransitionOutcome,
)
from gateway.domain.states import AttemptReason, AttemptState, JobStatus
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import SqlJobStore, open_store

DEADLINES: dict[str, float] = {}


async def claim(store: SqlJobStore, worker: str = "w1", ttl: float = 30.0) -> ClaimedAttempt:
    claimed = await store.claim_next_attempt(
        worker, lease_ttl=ttl, deadline_s=DEADLINES, default_deadline_s=10.0
    )
    assert claimed is not None
    return claimed


async def test_claim_moves_attempt_to_running_and_records_read_version(
    store: SqlJobStore, make_job: Any
) -> None:
    job = (await store.create_or_get(make_job())).job
    claimed = await claim(store)
    assert claimed.attempt.state is AttemptState.RUNNING
    assert claimed.attempt.read_version == 1
    assert claimed.attempt.lease_owner == "w1"
    assert claimed.job.id == job.id
    assert (
        await store.claim_next_attempt("w2", lease_ttl=1, deadline_s={}, default_deadline_s=1)
        is None
    )
    fresh = await store.get_job(job.id)
    assert fresh is not None and fresh.status is JobStatus.RUNNING and fresh.version == 1


async def test_concurrent_claims_take_each_attempt_once(store: SqlJobStore, make_job: Any) -> None:
    for i in range(10):
        await store.create_or_get(make_job(key=f"k{i}"))
    claims = await asyncio.gather(
        *(
            store.claim_next_attempt(f"w{i}", lease_ttl=5, deadline_s={}, default_deadline_s=5)
            for i in range(20)
        )
    )
    taken = [c.attempt.id for c in claims if c is not None]
    assert len(taken) == len(set(taken)) == 10


async def test_new_attempt_is_refused_while_one_is_starting_running_or_unknown(
    store: SqlJobStore, make_job: Any
) -> None:
    job = (await store.create_or_get(make_job())).job
    first = job.attempts[0]
    refused = await store.add_attempt(job.id, "sim-anthropic", AttemptReason.MANUAL)
    assert refused.outcome is AddAttemptOutcome.BLOCKED
    assert refused.blocking is not None and refused.blocking.state is AttemptState.STARTING

    await claim(store)
    refused = await store.add_attempt(job.id, "sim-anthropic", AttemptReason.MANUAL)
    assert refused.outcome is AddAttemptOutcome.BLOCKED
    assert refused.blocking is not None and refused.blocking.state is AttemptState.RUNNING

    moved = await store.mark_unknown(first.id, {"outcome": "unknown", "reason": "timeout"})
    assert moved.outcome is TransitionOutcome.DONE
    assert moved.job is not None and moved.job.status is JobStatus.UNKNOWN
    for reason, allow in ((AttemptReason.MANUAL, False), (AttemptReason.HEDGE, True)):
        refused = await store.add_attempt(job.id, "sim-anthropic", reason, allow_running=allow)
        assert refused.outcome is AddAttemptOutcome.BLOCKED
        assert refused.blocking is not None and refused.blocking.id == first.id
        assert refused.blocking.state is AttemptState.UNKNOWN

    resolved = await store.resolve(first.id, AttemptState.FAILED, note="provider says no")
    assert resolved.outcome is TransitionOutcome.DONE
    assert resolved.job is not None and resolved.job.status is JobStatus.FAILED
    added = await store.add_attempt(job.id, "sim-anthropic", AttemptReason.MANUAL)
    assert added.outcome is AddAttemptOutcome.ADDED
    assert added.attempt is not None and added.attempt.number == 2
    assert added.job is not None and added.job.status is JobStatus.QUEUED
    assert added.job.version == 2  # reopening a failed job is a decision
    kinds = [e.kind for e in await store.events(job.id)]
    assert kinds.count("attempt_refused") == 4
    assert "job_reopened" in kinds


async def test_hedge_may_join_a_running_attempt_but_not_a_manual_request(
    store: SqlJobStore, make_job: Any
) -> None:
    job = (await store.create_or_get(make_job())).job
    await claim(store)
    hedge = await store.add_attempt(job.id, "b", AttemptReason.HEDGE, allow_running=True)
    assert hedge.outcome is AddAttemptOutcome.ADDED
    again = await store.add_attempt(job.id, "c", AttemptReason.HEDGE, allow_running=True)
    assert again.outcome is AddAttemptOutcome.BLOCKED  # the hedge is still starting


async def test_reverse_order_finish_first_to_commit_wins(store: SqlJobStore, make_job: Any) -> None:
    job = (await store.create_or_get(make_job())).job
    primary = await claim(store, "w1")
    await store.add_attempt(job.id, "fallback", AttemptReason.HEDGE, allow_running=True)
    hedge = await claim(store, "w2")
    assert primary.attempt.read_version == hedge.attempt.read_version == 1

    won = await store.finalize(hedge.attempt.id, {"answer": "fast"})
    late = await store.finalize(primary.attempt.id, {"answer": "slow"})

    assert won.outcome is FinalizeOutcome.WON
    assert late.outcome is FinalizeOutcome.LOST and late.winner == hedge.attempt.id
    final = await store.get_job(job.id)
    assert final is not None
    assert final.status is JobStatus.SUCCEEDED
    assert final.result == {"answer": "fast"}
    assert final.completed_by == hedge.attempt.id
    assert final.version == 2
    states = {a.id: a.state for a in final.attempts}
    assert states[primary.attempt.id] is AttemptState.LOST
    assert states[hedge.attempt.id] is AttemptState.SUCCEEDED
    lost = [e for e in await store.events(job.id) if e.kind == "race_lost"]
    assert len(lost) == 1 and lost[0].detail["winner"] == hedge.attempt.id
    assert "slow" not in repr(await store.events(job.id))


async def test_twenty_racing_finalizers_make_exactly_one_winner(
    database_url: str, make_job: Any
) -> None:
    stores = [
        await open_store(
            database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
        )
        for _ in range(2)
    ]
    try:
        job = (await stores[0].create_or_get(make_job())).job
        claimed = [await claim(stores[0], "w0")]
        for i in range(1, 20):
            added = await stores[0].add_attempt(
                job.id, f"p{i}", AttemptReason.HEDGE, allow_running=True
            )
            assert added.outcome is AddAttemptOutcome.ADDED
            claimed.append(await claim(stores[0], f"w{i}"))
        results = await asyncio.gather(
            *(
                stores[i % 2].finalize(c.attempt.id, {"by": c.attempt.id})
                for i, c in enumerate(claimed)
            )
        )
        winners = [r for r in results if r.outcome is FinalizeOutcome.WON]
        assert len(winners) == 1
        assert sum(r.outcome is FinalizeOutcome.LOST for r in results) == 19
        final = await stores[0].get_job(job.id)
        assert final is not None and final.version == 2
        assert final.result == {"by": winners[0].attempt_id}
        assert [a.state for a in final.attempts].count(AttemptState.SUCCEEDED) == 1
    finally:
        for s in stores:
            await s.close()


async def test_cancel_racing_finalize_only_one_takes_effect(
    store: SqlJobStore, make_job: Any
) -> None:
    for round_ in range(6):
        job = (await store.create_or_get(make_job(key=f"race{round_}"))).job
        running = await claim(store)
        if round_ % 2:
            cancel, fin = await asyncio.gather(
                store.cancel(job.id), store.finalize(running.attempt.id, {"ok": 1})
            )
        else:
            fin, cancel = await asyncio.gather(
                store.finalize(running.attempt.id, {"ok": 1}), store.cancel(job.id)
            )
        final = await store.get_job(job.id)
        assert final is not None
        cancelled = cancel.outcome is TransitionOutcome.DONE
        won = fin.outcome is FinalizeOutcome.WON
        assert cancelled != won, (cancel, fin)
        assert final.status is (JobStatus.CANCELLED if cancelled else JobStatus.SUCCEEDED)
        assert final.version == 2
        assert (final.result is None) == cancelled


async def test_cancel_drops_unsent_attempts_and_later_results_lose(
    store: SqlJobStore, make_job: Any
) -> None:
    job = (await store.create_or_get(make_job())).job
    running = await claim(store)
    await store.add_attempt(job.id, "b", AttemptReason.HEDGE, allow_running=True)
    cancelled = await store.cancel(job.id, owner_id="alice")
    assert cancelled.outcome is TransitionOutcome.DONE
    assert cancelled.job is not None
    assert [a.state for a in cancelled.job.attempts] == [
        AttemptState.RUNNING,
        AttemptState.CANCELLED,
    ]
    late = await store.finalize(running.attempt.id, {"x": 1})
    assert late.outcome is FinalizeOutcome.LOST and late.winner is None
    again = await store.cancel(job.id)
    assert again.outcome is TransitionOutcome.CONFLICT
    assert (await store.cancel(job.id, owner_id="bob")).outcome is TransitionOutcome.NOT_FOUND
    final = await store.get_job(job.id)
    assert final is not None and final.result is None and final.status is JobStatus.CANCELLED


async def test_definite_failure_adds_failover_in_the_same_transaction(
    store: SqlJobStore, make_job: Any
) -> None:
    await store.create_or_get(make_job())
    first = await claim(store)
    failed = await store.fail_attempt(
        first.attempt.id,
        {"outcome": "definite", "reason": "status_503"},
        next_provider="sim-anthropic",
    )
    assert failed.outcome is TransitionOutcome.DONE
    assert failed.added is not None and failed.added.reason is AttemptReason.FAILOVER
    assert failed.job is not None and failed.job.status is JobStatus.QUEUED
    second = await claim(store)
    assert second.attempt.provider == "sim-anthropic" and second.attempt.number == 2
    last = await store.fail_attempt(second.attempt.id, {"outcome": "definite", "reason": "x"})
    assert last.added is None
    assert last.job is not None and last.job.status is JobStatus.FAILED
    assert last.job.error == {"outcome": "definite", "reason": "x"}
    # A failure reported twice does not move anything the second time.
    twice = await store.fail_attempt(second.attempt.id, {"reason": "again"})
    assert twice.outcome is TransitionOutcome.CONFLICT


async def test_unknown_leaves_only_by_resolution(store: SqlJobStore, make_job: Any) -> None:
    job = (await store.create_or_get(make_job())).job
    running = await claim(store)
    await store.mark_unknown(running.attempt.id, {"reason": "timeout"})
    assert (await store.finalize(running.attempt.id, {"x": 1})).outcome is FinalizeOutcome.STALE
    assert (await store.fail_attempt(running.attempt.id, {})).outcome is TransitionOutcome.CONFLICT
    resolved = await store.resolve(running.attempt.id, AttemptState.SUCCEEDED, result={"x": 2})
    assert resolved.outcome is TransitionOutcome.DONE
    assert resolved.job is not None and resolved.job.result == {"x": 2}
    assert resolved.job.completed_by == running.attempt.id
    again = await store.resolve(running.attempt.id, AttemptState.FAILED)
    assert again.outcome is TransitionOutcome.CONFLICT
    assert job.id == resolved.job.id


async def test_resolving_success_after_cancel_loses(store: SqlJobStore, make_job: Any) -> None:
    job = (await store.create_or_get(make_job())).job
    running = await claim(store)
    await store.mark_unknown(running.attempt.id, {"reason": "timeout"})
    await store.cancel(job.id)
    resolved = await store.resolve(running.attempt.id, AttemptState.SUCCEEDED, result={"x": 1})
    assert resolved.attempt is not None and resolved.attempt.state is AttemptState.LOST
    final = await store.get_job(job.id)
    assert final is not None and final.status is JobStatus.CANCELLED and final.result is None


async def test_resolve_failed_can_add_the_failover(store: SqlJobStore, make_job: Any) -> None:
    job = (await store.create_or_get(make_job())).job
    running = await claim(store)
    await store.mark_unknown(running.attempt.id, {"reason": "timeout"})
    resolved = await store.resolve(
        running.attempt.id, AttemptState.FAILED, note="ops checked", next_provider="b"
    )
    assert resolved.added is not None and resolved.added.provider == "b"
    assert resolved.job is not None and resolved.job.status is JobStatus.QUEUED
    assert job.id == resolved.job.id


async def test_expired_lease_becomes_unknown_and_is_never_reclaimed(
    database_url: str, make_job: Any
) -> None:
    clock = ManualClock()
    store = await open_store(
        database_url,
        clock=clock,
        shortcuts=ShortcutsConfig.from_env(),
        database=DatabaseConfig.from_env(),
    )
    try:
        job = (await store.create_or_get(make_job())).job
        running = await claim(store, ttl=5)
        clock.advance(3)
        assert await store.renew_lease(running.attempt.id, "w1", lease_ttl=5)
        assert not await store.renew_lease(running.attempt.id, "intruder", lease_ttl=5)
        clock.advance(4)
        assert await store.reap_expired_leases() == []
        clock.advance(2)
        [reaped] = await store.reap_expired_leases()
        assert reaped.id == running.attempt.id and reaped.state is AttemptState.UNKNOWN
        assert reaped.error == {"outcome": "unknown", "reason": "lease_expired"}
        assert (
            await store.claim_next_attempt("w2", lease_ttl=5, deadline_s={}, default_deadline_s=5)
            is None
        )
        final = await store.get_job(job.id)
        assert final is not None and final.status is JobStatus.UNKNOWN
        assert await store.count_attempts(AttemptState.UNKNOWN) == 1
        assert [a.id for a in await store.list_attempts(AttemptState.UNKNOWN)] == [reaped.id]
    finally:
        await store.close()


async def test_a_queued_hedge_is_cancelled_unsent_when_the_primary_wins(
    store: SqlJobStore, make_job: Any
) -> None:
    job = (await store.create_or_get(make_job())).job
    primary = await claim(store)
    hedge = await store.add_attempt(job.id, "fallback", AttemptReason.HEDGE, allow_running=True)
    assert hedge.attempt is not None
    won = await store.finalize(primary.attempt.id, {"answer": 1})
    assert won.outcome is FinalizeOutcome.WON
    assert (
        await store.claim_next_attempt("w2", lease_ttl=5, deadline_s={}, default_deadline_s=5)
        is None
    )  # nothing is sent for a job that is already decided
    final = await store.get_job(job.id)
    assert final is not None
    assert [a.state for a in final.attempts] == [AttemptState.SUCCEEDED, AttemptState.CANCELLED]
    assert final.attempts[1].error == {"reason": "job_decided_before_send"}
    # The job the decision hands to waiters is the job as committed, hedge included.
    assert won.job == final
    cancelled = [e for e in await store.events(job.id) if e.kind == "attempt_cancelled"]
    assert [(e.attempt_id, e.detail) for e in cancelled] == [(hedge.attempt.id, {"why": "decided"})]


async def test_a_finish_racing_its_lease_expiry_is_decided_one_way_only(
    database_url: str, make_job: Any
) -> None:
    """The runner's success and the reaper's ``unknown`` race: exactly one of them lands."""
    clock = ManualClock()
    finisher = await open_store(
        database_url,
        clock=clock,
        shortcuts=ShortcutsConfig.from_env(),
        database=DatabaseConfig.from_env(),
    )
    reaper = await open_store(
        database_url,
        clock=clock,
        shortcuts=ShortcutsConfig.from_env(),
        database=DatabaseConfig.from_env(),
    )

    async def finish_after(delay: float, attempt_id: str, n: int) -> Any:
        await asyncio.sleep(delay)
        return await finisher.finalize(attempt_id, {"answer": n})

    outcomes = set()
    # The reaper gets a head start from none to far more than it needs.
    delays = [0.0, 0.0005, 0.001, 0.002, 0.005, 0.0, 0.001, 0.003, 0.2, 0.2]
    try:
        for n, delay in enumerate(delays):
            job = (await finisher.create_or_get(make_job(key=f"race-{n}"))).job
            running = await claim(finisher, ttl=5)
            clock.advance(6)  # the lease has expired: both may act
            reaped, won = await asyncio.gather(
                reaper.reap_expired_leases(), finish_after(delay, running.attempt.id, n)
            )
            outcomes.add(won.outcome)
            final = await finisher.get_job(job.id)
            assert final is not None
            (attempt,) = final.attempts
            if won.outcome is FinalizeOutcome.WON:
                assert reaped == []
                assert attempt.state is AttemptState.SUCCEEDED
                assert final.status is JobStatus.SUCCEEDED and final.result == {"answer": n}
                assert won.job == final
            else:
                assert won.outcome is FinalizeOutcome.STALE
                assert [r.id for r in reaped] == [attempt.id]
                assert attempt.state is AttemptState.UNKNOWN
                assert final.status is JobStatus.UNKNOWN and final.result is None
            kinds = [e.kind for e in await finisher.events(job.id)]
            assert ("attempt_succeeded" in kinds) != ("attempt_unknown" in kinds)
        assert FinalizeOutcome.STALE in outcomes  # the reaper's side was exercised too
    finally:
        await finisher.close()
        await reaper.close()


async def test_a_queued_failover_is_cancelled_when_an_unknown_attempt_is_resolved_as_won(
    store: SqlJobStore, make_job: Any
) -> None:
    job = (await store.create_or_get(make_job())).job
    first = await claim(store)
    hedge = await store.add_attempt(job.id, "fallback", AttemptReason.HEDGE, allow_running=True)
    assert hedge.attempt is not None
    await store.mark_unknown(first.attempt.id, {"reason": "timeout"})
    resolved = await store.resolve(first.attempt.id, AttemptState.SUCCEEDED, result={"r": 1})
    assert resolved.job is not None
    assert [a.state for a in resolved.job.attempts] == [
        AttemptState.SUCCEEDED,
        AttemptState.CANCELLED,
    ]


async def test_provider_error_text_with_nul_is_stored_scrubbed_on_every_database(
    store: SqlJobStore, make_job: Any
) -> None:
    job = (await store.create_or_get(make_job())).job
    running = await claim(store)
    failed = await store.fail_attempt(
        running.attempt.id, {"reason": "status_400", "message": "bad\x00body \ud800"}
    )
    assert failed.outcome is TransitionOutcome.DONE
    final = await store.get_job(job.id)
    assert final is not None and final.error is not None
    assert final.error["message"] == "bad\ufffdbody ?"
    assert final.attempts[0].error == final.error


async def test_a_hedge_committed_while_the_decision_waits_for_the_job_is_still_cancelled(
    database_url: str, make_job: Any
) -> None:
    """The decision waits for the job's lock; what committed meanwhile is not lost.

    A review reproduced it on PostgreSQL: a hedge added (and committed) while the
    one-statement decision waited for the job's lock was invisible to its snapshot, left
    ``starting`` on a decided job and missing from the job handed to waiters.
    """
    from gateway.store.transaction import WriteTx

    store = await open_store(
        database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    other = await open_store(
        database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        job = (await store.create_or_get(make_job())).job
        primary = await claim(store)
        async with other.engine.connect() as conn:
            tx = await conn.begin()
            writing = WriteTx(conn, other.db)
            await writing.lock_job(job.id)
            hedge = await writing.insert_attempt(job.id, 2, "fallback", AttemptReason.HEDGE)
            await writing.refresh_status(job.id)
            deciding = asyncio.create_task(store.finalize(primary.attempt.id, {"answer": 1}))
            await asyncio.sleep(0.3)  # the decision is now waiting (PostgreSQL) for the lock
            await tx.commit()
        won = await asyncio.wait_for(deciding, 10)
        assert won.outcome is FinalizeOutcome.WON
        final = await store.get_job(job.id)
        assert final is not None
        assert {a.id: a.state for a in final.attempts} == {
            primary.attempt.id: AttemptState.SUCCEEDED,
            hedge.id: AttemptState.CANCELLED,
        }
        assert won.job == final
    finally:
        await store.close()
        await other.close()
