"""Routes, wake-ups, graceful shutdown, the reaper and metrics of the dispatcher."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import time

from dispatch_fakes import (
    MakeDispatcher,
    ScriptedProvider,
    SpyStore,
    answer,
    make_attempt,
    make_job,
)

from gateway.domain.records import ClaimedAttempt
from gateway.domain.states import AttemptState
from gateway.metrics import AttemptOutcome, Metrics


def claim(store: SpyStore, job_id: str = "job_1") -> None:
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)
    attempt = dataclasses.replace(
        make_attempt(1, "p1", job_id=job_id, deadline_at=deadline), id=f"att_{job_id}"
    )
    store.claims.append(ClaimedAttempt(attempt=attempt, job=make_job(job_id)))
    store.jobs[job_id] = make_job(job_id, attempts=(attempt,))


async def finalized(store: SpyStore, within: float = 1.0) -> bool:
    """Wait until the dispatcher asked the store for a decision; say whether it did."""
    for _ in range(int(within / 0.01)):
        if store.named("finalize"):
            break
        await asyncio.sleep(0.01)
    return bool(store.named("finalize"))


def test_effective_fallbacks_are_configured_and_certified_in_route_order(
    make_dispatcher: MakeDispatcher,
) -> None:
    d = make_dispatcher(certified=(("p1", "p3"), ("p1", "p2")))
    assert d.effective_fallbacks("toy@1", "p1") == ["p2", "p3"]
    d = make_dispatcher(certified=(("p1", "p3"),))
    assert d.effective_fallbacks("toy@1", "p1") == ["p3"]


def test_a_client_chosen_primary_may_fall_back_on_the_routes_primary(
    make_dispatcher: MakeDispatcher,
) -> None:
    d = make_dispatcher(certified=(("p2", "p1"), ("p2", "p3")))
    assert d.effective_fallbacks("toy@1", "p2") == ["p1", "p3"]


def test_unknown_contract_or_provider_has_no_fallbacks(make_dispatcher: MakeDispatcher) -> None:
    d = make_dispatcher()
    assert d.effective_fallbacks("nope@1", "p1") == []
    assert d.effective_fallbacks("toy@1", "nowhere") == []


async def test_an_idle_runner_wakes_at_once_when_an_attempt_is_published(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    d = make_dispatcher(dispatcher={"poll_interval": 30.0, "runners": 1})
    await d.start()
    try:
        await asyncio.sleep(0.05)  # the runner found nothing and sleeps on the hub
        claim(store)
        began = time.monotonic()
        d.hub.publish_attempt()
        assert await finalized(store)
        assert time.monotonic() - began < 0.5
    finally:
        await d.stop()


async def test_a_wake_up_costs_one_claim_not_one_per_idle_runner(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    d = make_dispatcher(dispatcher={"poll_interval": 30.0, "runners": 8})
    await d.start()
    try:
        await asyncio.sleep(0.1)
        assert len(store.claim_kwargs) == 1  # one runner claims; seven wait their turn
        d.hub.publish_attempt()
        await asyncio.sleep(0.1)
        assert len(store.claim_kwargs) == 2
    finally:
        await d.stop()


async def test_queued_attempts_run_concurrently_on_several_runners(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    slow = ScriptedProvider("p1", *(answer({"label": "x"}, delay=0.3) for _ in range(3)))
    d = make_dispatcher(
        providers={"p1": slow, "p2": ScriptedProvider("p2"), "p3": ScriptedProvider("p3")},
        dispatcher={"poll_interval": 30.0, "runners": 4},
    )
    for n in range(3):
        claim(store, f"job_{n}")
    began = time.monotonic()
    await d.start()
    try:
        for _ in range(100):
            if len(store.named("finalize")) == 3:
                break
            await asyncio.sleep(0.02)
    finally:
        await d.stop()

    assert len(store.named("finalize")) == 3
    assert time.monotonic() - began < 0.8  # three 0.3 s calls overlapped


async def test_runners_poll_when_no_wake_up_arrives(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    d = make_dispatcher(dispatcher={"poll_interval": 0.1, "runners": 1})
    await d.start()
    try:
        await asyncio.sleep(0.05)
        claim(store)  # no publish: another process made it and NOTIFY got lost
        assert await finalized(store)
    finally:
        await d.stop()


async def test_a_new_job_waits_a_moment_for_a_slot_being_freed(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    d = make_dispatcher(dispatcher={"poll_interval": 30.0, "runners": 1})
    await d.start()
    try:
        await asyncio.sleep(0.05)  # the runner's first look is over: the one slot is free
        assert await d.reserve("p1") is not None  # a first attempt runs in this process
        asyncio.get_running_loop().call_later(0.002, d.release)  # it decides at once
        assert await d.reserve("p1") is not None  # the next job takes its slot
        # A loop turn under saturation can take tens of ms on a slow host: a slot that
        # comes back 40 ms later is still taken, not left for a queued job's claim.
        asyncio.get_running_loop().call_later(0.04, d.release)
        assert await d.reserve("p1") is not None
        began = time.monotonic()
        assert await d.reserve("p1") is None  # nothing frees: this one is queued
        assert time.monotonic() - began < 0.5
        d.release()
    finally:
        await d.stop()


async def test_a_periodic_look_takes_no_slot_while_every_slot_is_busy(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    d = make_dispatcher(dispatcher={"poll_interval": 0.05, "runners": 1})
    await d.start()
    try:
        await asyncio.sleep(0.05)
        assert await d.reserve("p1") is not None
        await asyncio.sleep(0.12)  # two poll intervals with the only slot busy
        looks = len(store.claim_kwargs)
        d.release()
        # The freed slot goes to the next new job, not to a runner that finds nothing.
        assert await d.reserve("p1") is not None
        await asyncio.sleep(0.2)
        assert len(store.claim_kwargs) == looks
        d.release()
        claim(store)
        d.hub.publish_attempt()  # a queued attempt: a runner claims it at once
        assert await finalized(store)
    finally:
        await d.stop()


async def test_a_lost_wake_up_is_claimed_even_while_new_jobs_refill_every_slot(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    d = make_dispatcher(dispatcher={"poll_interval": 0.05, "runners": 1})
    await d.start()
    try:
        await asyncio.sleep(0.05)
        assert await d.reserve("p1") is not None
        claim(store)  # queued by another process; its NOTIFY never arrived
        deadline = time.monotonic() + 2.0
        while not store.named("finalize") and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
            d.release()  # an in-process attempt decides, and a new job takes its slot
            for _ in range(1000):  # (the runner's claim, if it took the slot, is quick)
                if await d.reserve("p1") is not None:
                    break
        assert store.named("finalize")  # within a few poll intervals, not never
        d.release()
    finally:
        await d.stop()


async def test_a_queued_attempt_gets_the_next_slot_before_a_new_job(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    slow = ScriptedProvider("p1", answer({"label": "x"}, delay=0.2))
    d = make_dispatcher(
        providers={"p1": slow, "p2": ScriptedProvider("p2"), "p3": ScriptedProvider("p3")},
        dispatcher={"poll_interval": 30.0, "runners": 1},
    )
    await d.start()
    try:
        await asyncio.sleep(0.05)
        assert await d.reserve("p1") is not None
        claim(store)
        d.hub.publish_attempt()  # queued while the slot is busy: a runner waits for it
        await asyncio.sleep(0.05)
        d.release()
        assert await d.reserve("p1") is None  # the queued attempt runs first (0.2 s)
        assert await finalized(store)
    finally:
        await d.stop()


async def test_a_bug_while_deciding_leaves_the_attempt_to_the_reaper(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    d = make_dispatcher(dispatcher={"runners": 1, "poll_interval": 0.05})
    store.finalize_errors = [RuntimeError("not the database")]
    claim(store, "job_1")
    claim(store, "job_2")
    await d.start()
    try:
        for _ in range(100):
            if store.named("finalize"):
                break
            await asyncio.sleep(0.02)
    finally:
        await d.stop()

    # job_1's attempt stays running under its lease (no guess made); the runner went on.
    [(args, _)] = store.named("finalize")
    assert args[0] == "att_job_2" and store.claims == []
    assert store.named("mark_unknown") == [] and store.named("fail_attempt") == []


async def test_a_decision_the_database_could_not_take_is_tried_again(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    """The answer is in memory only: a failover that fails the deciding statement is
    waited out (for as long as the lease lasts), not left to the reaper."""
    d = make_dispatcher(dispatcher={"runners": 1, "poll_interval": 0.05})
    store.finalize_errors = [ConnectionError("failover"), ConnectionError("still away")]
    claim(store, "job_1")
    await d.start()
    try:
        for _ in range(200):
            if store.named("finalize"):
                break
            await asyncio.sleep(0.02)
    finally:
        await d.stop()

    [(args, _)] = store.named("finalize")
    assert args[0] == "att_job_1"
    assert [a for a, _ in store.named("unavailable")] == [
        ("ConnectionError", "decision"),
        ("ConnectionError", "decision"),
    ]
    assert store.named("mark_unknown") == [] and store.named("fail_attempt") == []


async def test_a_decision_is_not_tried_past_its_retry_window(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    d = make_dispatcher(dispatcher={"runners": 1, "poll_interval": 0.05, "decision_retry": 0.6})
    store.finalize_errors = [ConnectionError("away")] * 50
    claim(store, "job_1")
    await d.start()
    try:
        await asyncio.sleep(1.5)
    finally:
        await d.stop()

    assert store.named("finalize") == []
    tries = [a for a, _ in store.named("unavailable") if a[1] == "decision"]
    assert len(tries) == 2  # a try after 0.25 s; the next pause (0.5 s) would pass the window


async def test_stop_lets_a_call_in_flight_finish_within_the_grace(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p1 = ScriptedProvider("p1", answer({"label": "x"}, delay=0.3))
    d = make_dispatcher(
        providers={"p1": p1, "p2": ScriptedProvider("p2"), "p3": ScriptedProvider("p3")},
        dispatcher={"runners": 1, "shutdown_grace": 2.0},
    )
    claim(store)
    await d.start()
    await asyncio.sleep(0.1)
    assert d.in_flight == 1

    await d.stop()

    assert len(store.named("finalize")) == 1
    assert d.in_flight == 0


async def test_stop_abandons_a_call_past_the_grace_and_claims_nothing_more(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    p1 = ScriptedProvider("p1", answer({"label": "x"}, delay=10.0))
    d = make_dispatcher(
        providers={"p1": p1, "p2": ScriptedProvider("p2"), "p3": ScriptedProvider("p3")},
        dispatcher={"runners": 1, "shutdown_grace": 0.2},
    )
    claim(store)
    await d.start()
    await asyncio.sleep(0.1)

    began = time.monotonic()
    await d.stop()
    claims_at_stop = len(store.claim_kwargs)
    claim(store, "job_2")
    await asyncio.sleep(0.2)

    assert time.monotonic() - began < 1.5
    assert store.named("finalize") == [] and store.named("mark_unknown") == []
    assert len(store.claim_kwargs) == claims_at_stop


async def test_reaper_counts_expired_leases_as_unknown_and_refreshes_the_gauge(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    d = make_dispatcher()
    store.reapable = [make_attempt(1, "p1", state=AttemptState.UNKNOWN)]
    store.unknown = [make_attempt(1, "p1", state=AttemptState.UNKNOWN)] * 3

    reaped = await d.reap_once()
    await d.metrics.refresh(store)  # type: ignore[arg-type]

    assert [a.id for a in reaped] == ["att_1"]
    body, content_type = d.metrics.render()
    assert content_type.startswith("text/plain")
    assert b'onejob_attempts_total{outcome="unknown",provider="p1"} 1.0' in body
    assert b"onejob_attempts_unknown 3.0" in body


async def test_reaper_runs_on_its_interval_after_start(
    store: SpyStore, make_dispatcher: MakeDispatcher
) -> None:
    d = make_dispatcher(dispatcher={"reap_interval": 0.05})
    await d.start()
    try:
        store.reapable = [make_attempt(1, "p1", state=AttemptState.UNKNOWN)]
        for _ in range(50):
            if not store.reapable:
                break
            await asyncio.sleep(0.02)
        assert store.reapable == []
    finally:
        await d.stop()


def test_each_metrics_object_counts_alone() -> None:
    a, b = Metrics(), Metrics()
    a.job_created()
    a.job_replayed()
    a.job_conflicted()
    a.attempt_finished("p1", AttemptOutcome.SUCCEEDED, wall_s=1.0, provider_s=0.9)
    body_a, _ = a.render()
    body_b, _ = b.render()
    assert b"onejob_jobs_created_total 1.0" in body_a
    assert b"onejob_jobs_replayed_total 1.0" in body_a
    assert b"onejob_jobs_conflicted_total 1.0" in body_a
    assert b'onejob_attempt_seconds_count{provider="p1"} 1.0' in body_a
    assert b"onejob_dispatch_overhead_seconds_count 1.0" in body_a
    assert b"onejob_jobs_created_total 0.0" in body_b
