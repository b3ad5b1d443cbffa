"""The rules of waiting for capacity (issue 43), the pacing and the circuit, with a
clock that moves only when told."""

from __future__ import annotations

import datetime as dt

from gateway.capacity.breaker import Breaker, Circuit
from gateway.capacity.gate import Capacity
from gateway.capacity.pacing import Bucket
from gateway.domain.capacity import SharedCapacity, Step, backoff, next_step
from gateway.settings import CapacityConfig
from providers.base import RateLimits
from providers.config import ProviderConfig, ProviderLimits

T0 = dt.datetime(2026, 12, 7, tzinfo=dt.UTC)


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def provider(name: str = "p", **limits: int) -> ProviderConfig:
    return ProviderConfig(
        name=name,
        protocol="openai",
        base_url="http://127.0.0.1:1/v1",
        model="m",
        limits=ProviderLimits(**limits),
    )


def capacity(clock: Clock, *providers: ProviderConfig, **config: object) -> Capacity:
    return Capacity(
        {p.name: p for p in providers or (provider(),)},
        CapacityConfig.model_validate(config),
        clock=clock,
        rand=lambda: 0.5,
    )


def test_backoff_doubles_to_its_cap_with_half_of_it_random() -> None:
    waits = [backoff(n, base=1.0, cap=8.0, rand=lambda: 1.0) for n in range(6)]
    assert waits == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert backoff(3, base=1.0, cap=8.0, rand=lambda: 0.0) == 4.0  # never below half


def test_next_step_waits_fails_over_or_expires() -> None:
    later = T0 + dt.timedelta(seconds=100)
    step = lambda wait, fallback, deadline=later: next_step(  # noqa: E731
        wait, now=T0, job_deadline=deadline, can_fail_over=fallback, patience=5.0
    )
    assert step(3.0, fallback=True) is Step.WAIT  # a short wait is worth it
    assert step(60.0, fallback=True) is Step.FAILOVER
    assert step(60.0, fallback=False) is Step.WAIT  # nowhere else to go: wait
    assert step(200.0, fallback=False) is Step.EXPIRE  # past the job's deadline
    assert step(3.0, fallback=True, deadline=T0 + dt.timedelta(seconds=2)) is Step.FAILOVER
    assert step(10_000.0, fallback=False, deadline=None) is Step.WAIT


def test_a_bucket_spaces_calls_at_its_rate() -> None:
    bucket = Bucket(rate=10.0, burst=1.0, now=0.0)
    assert bucket.wait(1.0, 0.0) == 0.0
    bucket.take(1.0, 0.0)
    assert abs(bucket.wait(1.0, 0.0) - 0.1) < 1e-9
    assert abs(bucket.wait(1.0, 0.05) - 0.05) < 1e-9
    assert bucket.wait(1.0, 0.1) == 0.0


def test_nothing_is_paced_until_a_limit_is_known_then_calls_are_spaced() -> None:
    clock = Clock()
    cap = capacity(clock)
    for _ in range(100):
        assert cap.admit("p").wait == 0.0
        cap.done("p")
    assert cap.free_flowing("p") and cap.members() == []
    # The provider announces 600 requests a minute: 10 a second, one every 100 ms.
    cap.answered("p", RateLimits(requests_limit=600, requests_remaining=599))
    assert not cap.free_flowing("p") and cap.members() == ["p"]
    assert cap.admit("p").wait == 0.0
    held = cap.admit("p")
    assert held.reason == "paced" and abs(held.wait - 0.1) < 1e-6
    assert cap.held(patience=5.0) == {"p": held.wait}
    clock.t += 0.1
    assert cap.admit("p").wait == 0.0
    [news] = cap.take_news()
    assert news.requests_per_minute == 600


def test_each_process_paces_by_its_slice_of_the_limit() -> None:
    clock = Clock()
    cap = capacity(clock, provider(requests_per_minute=600))
    cap.shared([SharedCapacity("p", members=3)])
    assert cap.admit("p").wait == 0.0
    assert abs(cap.admit("p").wait - 0.3) < 1e-6  # 600/min shared by three: 1 per 300 ms
    [state] = cap.states()
    assert state.requests_per_minute == 200 and abs(state.share - 1 / 3) < 1e-9


def test_a_429_that_names_its_time_pauses_the_provider_for_everyone() -> None:
    clock = Clock()
    cap = capacity(clock)
    wait = cap.refused("p", "rate_limited", 60.0, None)
    assert wait == 60.0
    held = cap.admit("p")
    assert held.reason == "rate_limited" and abs(held.wait - 60.0) < 1e-6
    assert cap.held(patience=5.0) == {}  # too long to hold in line: claimed, and failed over
    assert "p" in cap.blocked()
    [news] = cap.take_news()
    assert news.paused_until is not None and news.pause_reason == "rate_limited"
    # Capped at max_wait.
    assert capacity(Clock(), max_wait=30.0).refused("p", "rate_limited", 3600.0, None) == 30.0


def test_a_429_without_a_time_backs_off_and_halves_the_rate_it_took() -> None:
    clock = Clock()
    cap = capacity(clock)
    for _ in range(20):  # 20 answers over 2 s: about 10 a second
        cap.answered("p", None)
        clock.t += 0.1
    wait = cap.refused("p", "rate_limited", None, None, waits=0)
    assert 0.5 <= wait <= 1.0
    clock.t += wait
    assert cap.admit("p").wait == 0.0
    paced = cap.admit("p")
    assert paced.reason == "paced" and 0.15 < paced.wait < 0.25  # about 5 a second now


def test_a_hard_limit_of_concurrency_holds_calls_until_one_is_done() -> None:
    clock = Clock()
    cap = capacity(clock, provider(max_concurrency=2))
    assert cap.admit("p").wait == 0.0 and cap.admit("p").wait == 0.0
    assert cap.admit("p").reason == "concurrency"
    cap.done("p")
    assert cap.admit("p").wait == 0.0


def test_the_circuit_opens_after_consecutive_failures_probes_once_and_closes() -> None:
    clock = Clock()
    cap = capacity(clock, breaker_failures=3, breaker_open=5.0)
    for _ in range(2):
        cap.failed("p", "failure")
    cap.answered("p", None)  # an answer in between: not consecutive
    for _ in range(3):
        cap.failed("p", "failure")
    refused = cap.admit("p")
    assert refused.reason == "circuit_open" and abs(refused.wait - 5.0) < 1e-6
    [news] = cap.take_news()
    assert news.circuit == "open"
    clock.t += 5.0
    probe = cap.admit("p")
    assert probe.wait == 0.0 and probe.probe  # one call goes, the probe
    assert cap.admit("p").reason == "circuit_open"  # the rest wait for it
    cap.answered("p", None)
    assert cap.admit("p").wait == 0.0
    [news] = cap.take_news()
    assert news.circuit == "closed"


def test_a_failed_probe_opens_the_circuit_again() -> None:
    breaker = Breaker(failures=1, open_s=5.0)
    assert breaker.failed(0.0) and breaker.state is Circuit.OPEN
    assert breaker.wait(5.0) == 0.0 and breaker.state is Circuit.HALF_OPEN
    assert breaker.failed(5.1) and breaker.state is Circuit.OPEN
    assert abs(breaker.wait(5.2) - 4.9) < 1e-9


def test_rate_limits_do_not_open_the_circuit_unless_asked() -> None:
    clock = Clock()
    cap = capacity(clock, breaker_failures=2)
    for _ in range(5):
        cap.refused("p", "rate_limited", 0.0, None)
    assert cap.breakers["p"].state is Circuit.CLOSED
    counting = capacity(Clock(), breaker_failures=2, breaker_counts=["failure", "rate_limited"])
    for _ in range(2):
        counting.refused("p", "rate_limited", 0.0, None)
    assert counting.breakers["p"].state is Circuit.OPEN


def test_another_process_s_circuit_and_pause_are_honoured() -> None:
    clock = Clock()
    cap = capacity(clock)
    until = dt.datetime.fromtimestamp(clock.t + 10, dt.UTC)
    cap.shared([SharedCapacity("p", circuit_until=until)])
    assert cap.admit("p").reason == "circuit_open"
    cap.shared([SharedCapacity("p")])  # its probe was answered: closed everywhere
    assert cap.admit("p").wait == 0.0
    cap.shared([SharedCapacity("p", paused_until=until, pause_reason="overloaded")])
    assert cap.admit("p").reason == "overloaded"


def test_news_that_could_not_be_sent_is_kept_and_merged() -> None:
    clock = Clock()
    cap = capacity(clock)
    cap.refused("p", "rate_limited", 30.0, None)
    lost = cap.take_news()
    cap.answered("p", RateLimits(requests_limit=60))
    cap.requeue(lost)
    [news] = cap.take_news()
    assert news.paused_until is not None and news.requests_per_minute == 60


def test_a_limit_that_does_not_bind_keeps_first_attempts_in_process() -> None:
    """A configured limit the traffic never reaches cost 5x the gateway's CPU per sync job
    (bench.capacity): every job went through the claim queue, and runners looked again
    after each call for a provider 'held' for microseconds. With nothing in line at the
    last count, a limited provider with a call's worth now takes first attempts at once."""
    clock = Clock()
    cap = capacity(clock, provider(requests_per_minute=600))  # one call per 100 ms
    assert not cap.free_flowing("p")  # the queue never counted: assume some in line
    cap.queue_counted({})
    assert cap.free_flowing("p")
    assert cap.admit("p").wait == 0.0
    cap.done("p")
    assert not cap.free_flowing("p")  # no call's worth for 100 ms: the job queues
    assert cap.held(patience=5.0) == {}  # nothing in line: no runner looks again for it
    cap.queue_counted({"p": {"starting": 3}})
    assert set(cap.held(patience=5.0)) == {"p"}  # now its line waits for its pace
    clock.t += 0.1
    assert not cap.free_flowing("p")  # others are in line first: fair order
    cap.queue_counted({"p": {}})
    assert cap.free_flowing("p")
