"""Waiting for capacity at the store (issue 43): an attempt put back to wait, the claim
queue's order and exclusions, jobs past their deadline, what processes share."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from gateway.domain.capacity import CapacityNews
from gateway.domain.clock import ManualClock
from gateway.domain.records import AddAttemptOutcome, ClaimedAttempt, TransitionOutcome
from gateway.domain.states import AttemptReason, AttemptState, JobStatus
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import SqlJobStore, open_store
from gateway.store.claim import next_in_line

T0 = dt.datetime(2026, 12, 7, 12, 0, tzinfo=dt.UTC)
NOT_NOW = {"outcome": "definite", "reason": "status_429", "capacity": "rate_limited"}


async def claim(
    store: SqlJobStore, worker: str = "w1", exclude: tuple[str, ...] = ()
) -> ClaimedAttempt | None:
    return await store.claim_next_attempt(
        worker, lease_ttl=30, deadline_s={}, default_deadline_s=10.0, exclude=exclude
    )


async def clocked(database_url: str) -> tuple[SqlJobStore, ManualClock]:
    clock = ManualClock(T0)
    return await open_store(
        database_url,
        clock=clock,
        shortcuts=ShortcutsConfig.from_env(),
        database=DatabaseConfig.from_env(),
    ), clock


async def test_a_waiting_attempt_is_claimed_again_only_once_its_time_has_come(
    database_url: str, make_job: Any
) -> None:
    store, clock = await clocked(database_url)
    try:
        job = (await store.create_or_get(make_job())).job
        claimed = await claim(store)
        assert claimed is not None
        waited = await store.wait_attempt(
            claimed.attempt.id, "w1", ready_at=T0 + dt.timedelta(seconds=30), error=NOT_NOW
        )
        assert waited.outcome is TransitionOutcome.DONE
        assert waited.job is not None and waited.job.status is JobStatus.QUEUED
        [attempt] = waited.job.attempts
        assert attempt.state is AttemptState.WAITING and attempt.waits == 1
        assert attempt.lease_owner is None and attempt.read_version is None
        assert attempt.ready_at == T0 + dt.timedelta(seconds=30)

        clock.advance(29)
        assert await claim(store, "w2") is None  # not before the time it was given
        clock.advance(2)
        again = await claim(store, "w2")
        assert again is not None and again.attempt.id == attempt.id
        assert again.attempt.state is AttemptState.RUNNING and again.attempt.waits == 1
        assert again.attempt.downstream_key == f"{job.id}/1"  # the same key: nothing was done
        assert again.attempt.error is None  # the "not now" is in its attempt_waiting event
        events = [e.kind for e in await store.events(job.id)]
        assert events.count("attempt_waiting") == 1 and events.count("attempt_running") == 2
    finally:
        await store.close()


async def test_only_the_lease_holder_may_put_an_attempt_back_to_wait(
    store: SqlJobStore, make_job: Any
) -> None:
    await store.create_or_get(make_job())
    claimed = await claim(store)
    assert claimed is not None
    ready = dt.datetime.now(dt.UTC)
    other = await store.wait_attempt(claimed.attempt.id, "w2", ready_at=ready, error=NOT_NOW)
    assert other.outcome is TransitionOutcome.CONFLICT
    assert (await store.get_attempt(claimed.attempt.id)).state is AttemptState.RUNNING  # type: ignore[union-attr]


async def test_the_claim_queue_follows_ready_at_and_skips_excluded_providers(
    database_url: str, make_job: Any
) -> None:
    store, _ = await clocked(database_url)
    try:
        # Created in this order; queued in another (an owner's burst spaced out in line).
        late = (
            await store.create_or_get(dataclasses.replace(make_job(key="a"), queue_delay_s=5))
        ).job
        soon = (await store.create_or_get(make_job(key="b"))).job
        other = (await store.create_or_get(make_job(key="c", provider="sim-anthropic"))).job
        first = await claim(store, exclude=("sim-anthropic",))
        second = await claim(store, exclude=("sim-anthropic",))
        third = await claim(store, exclude=("sim-anthropic",))
        assert [c.job.id if c else None for c in (first, second, third)] == [soon.id, late.id, None]
        last = await claim(store)
        assert last is not None and last.job.id == other.id
    finally:
        await store.close()


async def test_a_job_past_its_deadline_is_never_claimed_and_expires(
    database_url: str, make_job: Any
) -> None:
    store, clock = await clocked(database_url)
    try:
        job = (await store.create_or_get(dataclasses.replace(make_job(), deadline_s=10))).job
        assert job.deadline_at == T0 + dt.timedelta(seconds=10)
        clock.advance(11)
        assert await claim(store) is None
        expired = await store.expire_overdue()
        assert expired == [job.attempts[0].id]
        done = await store.get_job(job.id)
        assert done is not None and done.status is JobStatus.FAILED
        assert done.error is not None and done.error["reason"] == "job_deadline"
        assert done.attempts[0].state is AttemptState.FAILED
        assert await store.expire_overdue() == []  # once
    finally:
        await store.close()


async def test_a_claim_never_gives_a_call_more_time_than_its_job_has_left(
    database_url: str, make_job: Any
) -> None:
    store, _ = await clocked(database_url)
    try:
        await store.create_or_get(dataclasses.replace(make_job(), deadline_s=4))
        claimed = await claim(store)  # the provider's deadline would be 10 s
        assert claimed is not None
        assert claimed.attempt.deadline_at == T0 + dt.timedelta(seconds=4)
    finally:
        await store.close()


async def test_a_manual_attempt_supersedes_one_waiting_for_capacity(
    store: SqlJobStore, make_job: Any
) -> None:
    job = (await store.create_or_get(make_job())).job
    claimed = await claim(store)
    assert claimed is not None
    ready = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5)
    await store.wait_attempt(claimed.attempt.id, "w1", ready_at=ready, error=NOT_NOW)
    # An automatic attempt still waits behind it (R4) ...
    failover = await store.add_attempt(job.id, "sim-anthropic", AttemptReason.FAILOVER)
    assert failover.outcome is AddAttemptOutcome.BLOCKED
    assert failover.blocking is not None and failover.blocking.state is AttemptState.WAITING
    # ... the client's button does not: nothing of the waiting one is in flight.
    added = await store.add_attempt(job.id, "sim-anthropic", AttemptReason.MANUAL, owner_id="alice")
    assert added.outcome is AddAttemptOutcome.ADDED and added.job is not None
    waiting, manual = added.job.attempts
    assert waiting.state is AttemptState.CANCELLED and waiting.error == {
        "reason": "superseded",
        "message": "replaced by a manual attempt",
    }
    assert manual.state is AttemptState.STARTING and manual.reason is AttemptReason.MANUAL


async def test_a_decision_cancels_an_attempt_waiting_for_capacity(
    store: SqlJobStore, make_job: Any
) -> None:
    """A hedge wins while the initial attempt waits: the waiting one is never sent."""
    job = (await store.create_or_get(make_job())).job
    first = await claim(store)
    assert first is not None
    hedge = await store.add_attempt(
        job.id, "sim-anthropic", AttemptReason.HEDGE, allow_running=True
    )
    assert hedge.outcome is AddAttemptOutcome.ADDED
    ready = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5)
    await store.wait_attempt(first.attempt.id, "w1", ready_at=ready, error=NOT_NOW)
    second = await claim(store, "w2")
    assert second is not None and second.attempt.reason is AttemptReason.HEDGE
    won = await store.finalize(second.attempt.id, {"ok": True})
    assert won.job is not None and won.job.status is JobStatus.SUCCEEDED
    states = {a.reason: a.state for a in won.job.attempts}
    assert states == {
        AttemptReason.INITIAL: AttemptState.CANCELLED,
        AttemptReason.HEDGE: AttemptState.SUCCEEDED,
    }


async def test_processes_share_pauses_circuits_limits_and_slices(
    store: SqlJobStore,
) -> None:
    now = dt.datetime.now(dt.UTC)
    soon, later = now + dt.timedelta(seconds=5), now + dt.timedelta(seconds=60)
    alive = now + dt.timedelta(seconds=3)
    news = [CapacityNews("p1", paused_until=later, pause_reason="rate_limited")]
    await store.share_capacity("gw-1", ["p1"], alive, news)
    # A shorter pause from another process never shortens the one in force.
    shorter = [CapacityNews("p1", paused_until=soon, pause_reason="overloaded")]
    rows = await store.share_capacity("gw-2", ["p1"], alive, shorter)
    [p1] = [r for r in rows if r.provider == "p1"]
    assert p1.paused_until is not None and abs((p1.paused_until - later).total_seconds()) < 0.01
    assert p1.pause_reason == "rate_limited" and p1.members == 2

    opened = [CapacityNews("p1", circuit="open", circuit_until=soon, requests_per_minute=600)]
    rows = await store.share_capacity("gw-1", ["p1"], alive, opened)
    [p1] = [r for r in rows if r.provider == "p1"]
    assert p1.circuit_until is not None and p1.requests_per_minute == 600

    rows = await store.share_capacity("gw-2", [], alive, [CapacityNews("p1", circuit="closed")])
    [p1] = [r for r in rows if r.provider == "p1"]
    assert p1.circuit_until is None and p1.members == 1  # gw-2 gave its slice back


async def test_the_claim_takes_the_queue_index(database_url: str, make_job: Any) -> None:
    """The claim reads the partial index of unsent attempts, not every attempt ever made."""
    store = await open_store(
        database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        await store.create_or_get(make_job())
        pick = store.db.claim_pick(next_in_line(store.db.now(), exclude=("sim-anthropic",)))
        async with store.engine.connect() as conn:
            if store.db.name == "postgresql":
                await conn.exec_driver_sql("SET enable_seqscan = off")
            sql = str(pick.compile(conn.sync_engine, compile_kwargs={"literal_binds": True}))
            explain = "EXPLAIN QUERY PLAN " if store.db.name == "sqlite" else "EXPLAIN "
            plan = " ".join(str(r) for r in (await conn.exec_driver_sql(explain + sql)).all())
        assert "ix_attempts_unsent_ready_at" in plan, plan
    finally:
        await store.close()
