"""The adapters against a simulator that plays a rate-limited, overloaded or
quota-exhausted upstream, over real sockets: what the gateway will pace and wait on."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import pytest_asyncio

from providers.base import (
    NoCapacity,
    Overloaded,
    ProviderRequest,
    ProviderResult,
    QuotaExhausted,
    RateLimited,
)
from providers.simulator import run_simulator
from providers.simulator.control_client import SimulatorControl
from tests.integration.providers.conftest import CATALOG, Sim

PROTOCOLS = ("openai", "anthropic", "gemini", "openai-compatible")
#: Protocols whose API announces its limits in headers (Gemini says nothing).
ANNOUNCING = ("openai", "anthropic", "openai-compatible")
FAITHFUL = {"category": "billing", "total": 7}

by_protocol = pytest.mark.parametrize("protocol", PROTOCOLS)
pytestmark = pytest.mark.asyncio(loop_scope="module")


def control(sim: Any) -> SimulatorControl:
    return SimulatorControl(sim.client, sim.base_url)


async def settled(calls: list[Any]) -> list[Any]:
    return await asyncio.gather(*calls, return_exceptions=True)


class HeldClock:
    """The simulator's monotonic clock, which a test can hold still.

    A burst of 20 calls reaches the simulator over some milliseconds, more on a busy
    machine; at 10 requests per second every 100 ms of that would earn the burst one more
    token. Held, the bucket sees the burst arrive at one instant, as the test means it.
    """

    def __init__(self) -> None:
        self.held_at: float | None = None
        self.lost = 0.0  # seconds spent held, which the clock does not count

    def __call__(self) -> float:
        return (time.monotonic() if self.held_at is None else self.held_at) - self.lost

    def hold(self) -> None:
        self.held_at = time.monotonic()

    def release(self) -> None:
        assert self.held_at is not None
        self.lost += time.monotonic() - self.held_at
        self.held_at = None


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def held() -> AsyncIterator[tuple[Sim, HeldClock]]:
    clock = HeldClock()
    async with run_simulator(catalog=CATALOG, monotonic=clock) as running:
        async with httpx.AsyncClient() as client:
            yield Sim(running, client), clock


@by_protocol
async def test_a_burst_past_the_bucket_gets_the_burst_and_429s_that_say_when(
    held: tuple[Sim, HeldClock], make_request: Callable[..., ProviderRequest], protocol: str
) -> None:
    sim, clock = held
    await control(sim).reset()
    await control(sim).limit("sim-limited", 10, burst=5)
    clock.hold()
    outcomes = await settled([sim.call("sim-limited", protocol, make_request()) for _ in range(20)])
    answers = [o for o in outcomes if isinstance(o, ProviderResult)]
    refusals = [o for o in outcomes if isinstance(o, RateLimited)]
    assert (len(answers), len(refusals)) == (5, 15), outcomes
    assert all(a.output == FAITHFUL for a in answers)
    # Anthropic's retry-after is in whole seconds; the others say 100 ms.
    wait = 1.0 if protocol == "anthropic" else 0.1
    for refusal in refusals:
        assert refusal.outcome == "definite" and refusal.status_code == 429
        assert refusal.retry_after == pytest.approx(wait, abs=0.0011)
        if protocol in ANNOUNCING:
            assert refusal.limits is not None
            assert refusal.limits.requests_limit == 600
            assert refusal.limits.requests_remaining == 0
        else:
            assert refusal.limits is None
    if protocol in ANNOUNCING:
        assert all(a.limits is not None and a.limits.requests_limit == 600 for a in answers)
        assert sorted(a.limits.requests_remaining for a in answers if a.limits) == [0, 1, 2, 3, 4]
    with pytest.raises(RateLimited):  # not a moment later: the wait is needed
        await sim.call("sim-limited", protocol, make_request())
    clock.release()
    await asyncio.sleep(refusals[0].retry_after or 0.0)
    after = await sim.call("sim-limited", protocol, make_request())
    assert after.output == FAITHFUL
    calls = await sim.calls("sim-limited")
    assert sum(c["behaviour"] == "rate_limited" for c in calls) == 16
    assert all(c["status"] == 429 and c["model"] is None for c in calls if c["status"] != 200)
    assert sum(c["status"] == 200 for c in calls) == 6


@by_protocol
async def test_an_outage_is_overloaded_until_its_window_ends(
    sim: Any, make_request: Callable[..., ProviderRequest], protocol: str
) -> None:
    await control(sim).outage("sim-down", 0.6, retry_after=1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(Overloaded) as caught:
        await sim.call("sim-down", protocol, make_request())
    error = caught.value
    assert isinstance(error, NoCapacity) and error.capacity == "overloaded"
    assert error.status_code == (529 if protocol == "anthropic" else 503)
    assert error.retry_after == 1.0
    assert (await sim.call("sim-up", protocol, make_request())).output == FAITHFUL
    await asyncio.sleep(max(0.0, 0.65 - (loop.time() - started)))
    assert (await sim.call("sim-down", protocol, make_request())).output == FAITHFUL
    behaviours = [c["behaviour"] for c in await sim.calls("sim-down")]
    assert behaviours == ["outage", "ok"]


@by_protocol
async def test_the_quota_behaviour_is_quota_exhausted_never_no_capacity(
    sim: Any, make_request: Callable[..., ProviderRequest], protocol: str
) -> None:
    await control(sim).script("sim-broke", {"kind": "quota"})
    with pytest.raises(QuotaExhausted) as caught:
        await sim.call("sim-broke", protocol, make_request())
    assert not isinstance(caught.value, NoCapacity)
    assert caught.value.reason == "quota_exhausted"
    assert caught.value.outcome == "definite"
    assert caught.value.as_dict()["reason"] == "quota_exhausted"
    assert (await sim.call("sim-broke", protocol, make_request())).output == FAITHFUL


@by_protocol
@pytest.mark.parametrize("code", [429, 503, 529])
async def test_scripted_capacity_statuses_keep_their_retry_after(
    sim: Any, make_request: Callable[..., ProviderRequest], protocol: str, code: int
) -> None:
    await control(sim).script("sim-main", {"kind": "status", "code": code, "retry_after": 0.25})
    with pytest.raises(NoCapacity) as caught:
        await sim.call("sim-main", protocol, make_request())
    assert type(caught.value) is (RateLimited if code == 429 else Overloaded)
    assert caught.value.retry_after == 0.25
    assert caught.value.reason == f"status_{code}"
