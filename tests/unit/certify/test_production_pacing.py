"""The pace of ``--production`` calls (issue 48): the provider's configured limits, and a
"not now" waited out as a schedule. A fake clock advances only when the pacer sleeps."""

from __future__ import annotations

import asyncio

import pytest

from certify.pacing import MAX_WAIT, RETRIES, Pacer
from providers.base import Overloaded, ProviderRequest, ProviderResult, RateLimited, Usage
from providers.config import ProviderConfig

REQUEST = ProviderRequest(system="s", user="u", output_schema={}, schema_name="x", model="m")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


class Provider:
    """Refuses with ``refusals`` in turn, then answers; counts its calls."""

    def __init__(self, *refusals: Exception) -> None:
        self.refusals = list(refusals)
        self.calls = 0

    async def call(self, request: ProviderRequest) -> ProviderResult:
        self.calls += 1
        if self.refusals:
            raise self.refusals.pop(0)
        return ProviderResult({}, "{}", "r", Usage(), "stop", 0.01, "m")


def config(**limits: int) -> ProviderConfig:
    return ProviderConfig(
        name="f", protocol="openai", base_url="http://f/v1", model="m", limits=limits
    )


async def test_calls_are_spaced_by_the_configured_requests_per_minute() -> None:
    clock = Clock()
    pacer = Pacer(config(requests_per_minute=30), sleep=clock.sleep, clock=clock)
    provider = Provider()
    for _ in range(3):
        await pacer.call(provider, REQUEST)
    assert provider.calls == 3 and pacer.waited == [2.0, 2.0] and clock.now == 4.0


async def test_a_rate_limit_with_a_named_wait_is_waited_out_and_sent_again() -> None:
    clock = Clock()
    pacer = Pacer(config(), sleep=clock.sleep, clock=clock)
    provider = Provider(RateLimited("429", retry_after=1.5), Overloaded("529"))
    result = await pacer.call(provider, REQUEST)
    assert result.request_id == "r" and provider.calls == 3
    assert pacer.waited == [1.5, 1.0]  # the named wait, then the default for an unnamed one


async def test_a_wait_too_long_or_too_many_refusals_give_the_refusal_back() -> None:
    clock = Clock()
    pacer = Pacer(config(), sleep=clock.sleep, clock=clock)
    with pytest.raises(RateLimited):
        await pacer.call(Provider(RateLimited("429", retry_after=MAX_WAIT + 1)), REQUEST)
    assert pacer.waited == []
    refusing = Provider(*(Overloaded("503", retry_after=0.1) for _ in range(RETRIES + 1)))
    with pytest.raises(Overloaded):
        await pacer.call(refusing, REQUEST)
    assert refusing.calls == RETRIES + 1


async def test_no_more_calls_are_in_flight_than_the_configured_concurrency() -> None:
    pacer = Pacer(config(max_concurrency=2))
    in_flight = most = 0
    release, two_in = asyncio.Event(), asyncio.Event()

    class Slow:
        async def call(self, request: ProviderRequest) -> ProviderResult:
            nonlocal in_flight, most
            in_flight += 1
            most = max(most, in_flight)
            if in_flight == 2:
                two_in.set()
            await release.wait()
            in_flight -= 1
            return ProviderResult({}, "{}", "r", Usage(), "stop", 0.01, "m")

    calls = [asyncio.create_task(pacer.call(Slow(), REQUEST)) for _ in range(5)]
    await two_in.wait()
    for _ in range(10):  # the other three would be in by now, were they let in
        await asyncio.sleep(0)
    assert in_flight == 2
    release.set()
    await asyncio.gather(*calls)
    assert most == 2
