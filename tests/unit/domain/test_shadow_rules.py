"""The shadow checks' rules (issue 38): sampling, the call budget and rate, the threshold."""

from __future__ import annotations

from gateway.domain.clock import ManualClock
from gateway.domain.shadow import CallBudget, judge, sampled, value_hash
from gateway.domain.shadow_records import ShadowTally


def test_sampling_is_the_same_in_every_process_and_close_to_the_rate() -> None:
    jobs = [f"job_{n:05d}" for n in range(4000)]
    picked = [j for j in jobs if sampled(j, "claude", 0.1)]
    assert picked == [j for j in jobs if sampled(j, "claude", 0.1)]
    assert 320 <= len(picked) <= 480
    # Each fallback draws its own sample.
    assert picked != [j for j in jobs if sampled(j, "gemini", 0.1)]
    assert not any(sampled(j, "claude", 0.0) for j in jobs[:100])
    assert all(sampled(j, "claude", 1.0) for j in jobs[:100])


def test_the_rate_limit_spaces_a_process_calls() -> None:
    clock = ManualClock()
    budget = CallBudget(clock, per_hour=100, min_interval=2.0)
    assert budget.wait() == 0.0
    budget.took()
    assert budget.wait() == 2.0
    clock.advance(0.5)
    assert budget.wait() == 1.5
    clock.advance(1.5)
    assert budget.wait() == 0.0


def test_the_hourly_budget_counts_this_process_and_every_process() -> None:
    clock = ManualClock()
    budget = CallBudget(clock, per_hour=3, min_interval=0.0)
    for _ in range(3):
        assert not budget.exhausted()
        budget.took()
        clock.advance(600)
    assert budget.exhausted()  # three calls within the hour
    assert budget.sent_last_hour == 3
    clock.advance(1801)  # the first call is now more than an hour old
    assert budget.sent_last_hour == 2 and not budget.exhausted()
    assert budget.exhausted(recent=3)  # other processes' calls, counted in the database


def test_a_pair_is_suspended_only_past_the_threshold_with_enough_samples() -> None:
    few = ShadowTally(checks=5, disagreements=5)
    assert not judge(few, threshold=0.2, min_samples=20).suspend
    under = ShadowTally(checks=20, disagreements=3)
    assert not judge(under, threshold=0.2, min_samples=20).suspend
    at = ShadowTally(checks=20, disagreements=4)
    verdict = judge(at, threshold=0.2, min_samples=20)
    assert verdict.suspend and verdict.reason == "disagreed in 4 of 20 (20% >= 20%)"
    assert ShadowTally().rate is None
    assert not judge(ShadowTally(), threshold=0.2, min_samples=1).suspend


def test_values_are_reported_as_hashes() -> None:
    assert value_hash({"b": 1, "a": 2}) == value_hash({"a": 2, "b": 1})
    assert value_hash("billing") != value_hash("technical")
    assert len(value_hash("Priya")) == 12 and "Priya" not in value_hash("Priya")
