from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from providers.base import (
    AmbiguousStatus,
    BadOutput,
    ConnectFailed,
    ConnectionLost,
    Overloaded,
    ProviderRequest,
    RateLimited,
    Refused,
    Rejected,
    TimedOut,
    Unavailable,
)
from providers.client import provider_client
from providers.config import ProviderConfig
from providers.factory import build_provider
from providers.simulator import run_simulator

PROTOCOLS = ("openai", "anthropic", "gemini", "openai-compatible")
FAITHFUL = {"category": "billing", "total": 7}
SLOPPY = {"category": "other", "total": 8}

by_protocol = pytest.mark.parametrize("protocol", PROTOCOLS)
pytestmark = pytest.mark.asyncio(loop_scope="module")


@by_protocol
async def test_faithful_round_trip_returns_the_contract_answer(
    sim: Any, make_request: Callable[..., ProviderRequest], protocol: str
) -> None:
    result = await sim.call("sim-main", protocol, make_request())
    assert result.output == FAITHFUL
    assert json.loads(result.raw_text) == FAITHFUL
    assert result.request_id
    assert result.usage.input_tokens and result.usage.output_tokens
    assert result.finish_reason in ("stop", "tool_use", "STOP")
    [call] = await sim.calls()
    assert call["provider"] == "sim-main"
    assert call["idempotency_key"] == "job_01/1"
    assert call["contract"] == "fake-triage@1"
    assert call["system_prompt"] is True
    assert call["status"] == 200
    assert call["received_at"] <= call["finished_at"]


@by_protocol
async def test_same_input_gives_the_same_output(
    sim: Any, make_request: Callable[..., ProviderRequest], protocol: str
) -> None:
    first = await sim.call("sim-main", protocol, make_request(text="my parcel is lost"))
    second = await sim.call("sim-main", protocol, make_request(text="my parcel is lost"))
    assert first.raw_text == second.raw_text
    assert first.output == {"category": "shipping", "total": 7}
    assert first.request_id != second.request_id


@by_protocol
async def test_drifting_profile_wraps_valid_output_under_an_extra_key(
    sim: Any, make_request: Callable[..., ProviderRequest], protocol: str
) -> None:
    result = await sim.call("drifting", protocol, make_request())
    assert result.output == {"result": FAITHFUL}


@by_protocol
async def test_sloppy_profile_is_schema_shaped_but_wrong(
    sim: Any, make_request: Callable[..., ProviderRequest], protocol: str
) -> None:
    result = await sim.call("sloppy", protocol, make_request())
    assert result.output == SLOPPY
    assert set(result.output) == set(FAITHFUL)
    assert result.output != FAITHFUL


@by_protocol
async def test_no_system_profile_talks_around_the_json(
    sim: Any, make_request: Callable[..., ProviderRequest], protocol: str
) -> None:
    with pytest.raises(BadOutput) as caught:
        await sim.call("no-system", protocol, make_request())
    assert caught.value.reason == "not_json"
    assert '"category": "billing"' in (caught.value.body_excerpt or "")


@by_protocol
async def test_profiles_set_through_the_control_api_apply_per_provider(
    sim: Any, make_request: Callable[..., ProviderRequest], protocol: str
) -> None:
    response = await sim.client.post(f"{sim.base_url}/_sim/profiles", json={"sim-b": "drifting"})
    assert response.json()["profiles"] == {"sim-b": "drifting"}
    assert (await sim.call("sim-a", protocol, make_request())).output == FAITHFUL
    assert (await sim.call("sim-b", protocol, make_request())).output == {"result": FAITHFUL}


@by_protocol
async def test_scripted_delay_answers_normally_after_waiting(
    sim: Any, make_request: Callable[..., ProviderRequest], protocol: str
) -> None:
    await sim.script({"kind": "delay", "seconds": 0.3})
    result = await sim.call("sim-main", protocol, make_request(timeout=3.0))
    assert result.output == FAITHFUL
    assert result.latency >= 0.3


@by_protocol
async def test_scripted_hang_times_out_as_unknown(
    sim: Any, make_request: Callable[..., ProviderRequest], protocol: str
) -> None:
    await sim.script({"kind": "hang"})
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimedOut) as caught:
        await sim.call("sim-main", protocol, make_request(timeout=0.3))
    assert caught.value.outcome == "unknown"
    assert loop.time() - started < 2.0
    for _ in range(50):  # the simulator notices the hang-up shortly after
        [call] = await sim.calls()
        if call["outcome"] == "hung_up":
            break
        await asyncio.sleep(0.02)
    assert call["behaviour"] == "hang"
    assert call["outcome"] == "hung_up"
    assert call["status"] is None


@by_protocol
async def test_scripted_429_is_rate_limited_with_retry_after(
    sim: Any, make_request: Callable[..., ProviderRequest], protocol: str
) -> None:
    await sim.script({"kind": "status", "code": 429, "retry_after": 2})
    with pytest.raises(RateLimited) as caught:
        await sim.call("sim-main", protocol, make_request())
    assert caught.value.retry_after == 2.0
    assert caught.value.outcome == "definite"


@by_protocol
@pytest.mark.parametrize(
    ("code", "error"),
    [
        (503, Overloaded),
        (529, Overloaded),
        (500, Unavailable),
        (502, AmbiguousStatus),
        (504, AmbiguousStatus),
        (401, Rejected),
    ],
)
async def test_scripted_statuses_are_classified(
    sim: Any,
    make_request: Callable[..., ProviderRequest],
    protocol: str,
    code: int,
    error: type[Exception],
) -> None:
    await sim.script({"kind": "status", "code": code})
    with pytest.raises(error) as caught:
        await sim.call("sim-main", protocol, make_request())
    assert type(caught.value) is error
    assert getattr(caught.value, "status_code", None) == code


@by_protocol
@pytest.mark.parametrize("kind", ["truncated", "drop_after_headers"])
async def test_scripted_broken_connections_are_unknown(
    sim: Any, make_request: Callable[..., ProviderRequest], protocol: str, kind: str
) -> None:
    await sim.script({"kind": kind})
    with pytest.raises(ConnectionLost) as caught:
        await sim.call("sim-main", protocol, make_request())
    assert caught.value.outcome == "unknown"
    [call] = await sim.calls()
    assert call["behaviour"] == kind


@by_protocol
async def test_scripted_malformed_output_is_bad_output(
    sim: Any, make_request: Callable[..., ProviderRequest], protocol: str
) -> None:
    await sim.script({"kind": "malformed"})
    with pytest.raises(BadOutput) as caught:
        await sim.call("sim-main", protocol, make_request())
    assert caught.value.reason == "not_json"


@by_protocol
async def test_a_tight_output_limit_is_a_refusal(
    sim: Any, make_request: Callable[..., ProviderRequest], protocol: str
) -> None:
    with pytest.raises(Refused) as caught:
        await sim.call("sim-main", protocol, make_request(max_output_tokens=3))
    expected = "length" if protocol in ("openai", "openai-compatible") else "max_tokens"
    assert caught.value.reason == expected


@by_protocol
async def test_unknown_contract_is_rejected_in_the_api_error_shape(
    sim: Any, make_request: Callable[..., ProviderRequest], protocol: str
) -> None:
    with pytest.raises(Rejected) as caught:
        await sim.call("sim-main", protocol, make_request(contract="nope@9"))
    assert caught.value.status_code == 400
    assert "unknown contract 'nope@9'" in str(caught.value)
    with pytest.raises(Rejected):
        await sim.call("sim-main", protocol, make_request(user="no input block here"))


@by_protocol
async def test_connect_failure_on_a_closed_port_is_definite(
    make_request: Callable[..., ProviderRequest], protocol: str
) -> None:
    import socket

    with socket.socket() as probe:  # a port that was free a moment ago and has no listener
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    root = f"http://127.0.0.1:{port}"
    config = ProviderConfig(
        name="closed",
        protocol=protocol,  # type: ignore[arg-type]
        base_url=f"{root}/v1" if protocol.startswith("openai") else root,
        model="m",
    )
    async with httpx.AsyncClient() as client:
        with pytest.raises(ConnectFailed) as caught:
            await build_provider(config, client).call(make_request())
    assert caught.value.outcome == "definite"


async def test_calls_show_the_downstream_key_of_every_call(
    sim: Any, make_request: Callable[..., ProviderRequest]
) -> None:
    await sim.script({"kind": "status", "code": 502}, provider="sim-a")
    for key, provider in [("job_a/1", "sim-a"), ("job_a/1", "sim-a"), ("job_b/1", "sim-b")]:
        try:
            await sim.call(provider, "openai", make_request(idempotency_key=key))
        except AmbiguousStatus:
            pass
    calls = await sim.calls()
    assert [c["idempotency_key"] for c in calls] == ["job_a/1", "job_a/1", "job_b/1"]
    assert [c["seq"] for c in calls] == [1, 2, 3]
    assert sum(c["idempotency_key"] == "job_a/1" for c in calls) == 2
    assert [c["status"] for c in calls] == [502, 200, 200]
    assert [c["idempotency_key"] for c in await sim.calls("sim-b")] == ["job_b/1"]


async def test_provider_scripts_run_before_shared_ones_in_fifo_order(
    sim: Any, make_request: Callable[..., ProviderRequest]
) -> None:
    await sim.script({"kind": "status", "code": 503})
    await sim.script(
        {"kind": "status", "code": 429}, {"kind": "status", "code": 401}, provider="sim-a"
    )
    outcomes = []
    for provider in ["sim-a", "sim-b", "sim-a", "sim-a"]:
        try:
            await sim.call(provider, "anthropic", make_request())
            outcomes.append((provider, 200))
        except Exception as exc:
            outcomes.append((provider, getattr(exc, "status_code", None)))
    assert outcomes == [("sim-a", 429), ("sim-b", 503), ("sim-a", 401), ("sim-a", 200)]


async def test_script_count_repeats_the_behaviours_and_reset_clears_everything(
    sim: Any, make_request: Callable[..., ProviderRequest]
) -> None:
    payload = {"provider": None, "behaviours": [{"kind": "status", "code": 503}], "count": 2}
    response = await sim.client.post(f"{sim.base_url}/_sim/script", json=payload)
    assert response.json() == {"queued": 2, "pending": {"*": 2}}
    with pytest.raises(Overloaded):
        await sim.call("sim-a", "gemini", make_request())
    await sim.client.post(f"{sim.base_url}/_sim/profiles", json={"sim-a": "sloppy"})
    reset = await sim.client.post(f"{sim.base_url}/_sim/reset")
    assert reset.json() == {"reset": True}
    assert await sim.calls() == []
    assert (await sim.call("sim-a", "gemini", make_request())).output == FAITHFUL


async def test_stopping_the_simulator_releases_a_hung_request_quickly(
    make_request: Callable[..., ProviderRequest],
) -> None:
    loop = asyncio.get_running_loop()
    async with httpx.AsyncClient() as client:
        async with run_simulator(catalog={}) as running:
            config = ProviderConfig(
                name="p", protocol="openai", base_url=running.provider_url("p", "openai"), model="m"
            )
            await client.post(
                f"{running.base_url}/_sim/script", json={"behaviours": [{"kind": "hang"}]}
            )
            call = asyncio.create_task(
                build_provider(config, client).call(make_request(timeout=30.0))
            )
            for _ in range(100):
                if running.app.calls:
                    break
                await asyncio.sleep(0.01)
            started = loop.time()
        assert loop.time() - started < 3.0
        with pytest.raises((ConnectionLost, TimedOut)):
            await call


@by_protocol
@pytest.mark.parametrize(
    ("connect_timeout", "deadline"),
    [(0.2, 5.0), (5.0, 0.3), (5.0, 0.05)],
    ids=["connect-timeout-first", "deadline-first", "short-deadline"],
)
async def test_a_full_pool_is_definite_not_unknown(
    sim: Any,
    make_request: Callable[..., ProviderRequest],
    protocol: str,
    connect_timeout: float,
    deadline: float,
) -> None:
    """A call that waited for a pooled connection and never got one sent nothing: it is
    ``ConnectFailed`` (a failover may follow) within the connect timeout or 0.9 of the
    deadline, whichever is shorter, not ``TimedOut`` at the deadline. A deadline no longer
    than the connect timeout used to lose the tie to its own timer (started first) and
    end ``unknown``."""
    await sim.script({"kind": "delay", "seconds": 1.0})
    config = sim.config("sim-main", protocol).model_copy(
        update={"connect_timeout": connect_timeout}
    )
    async with provider_client(httpx.Limits(max_connections=1)) as client:
        adapter = build_provider(config, client)
        first = asyncio.create_task(adapter.call(make_request(timeout=5.0)))
        await asyncio.sleep(0.1)  # the first call holds the pool's one connection
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(ConnectFailed) as caught:
            await adapter.call(make_request(timeout=deadline))
        assert caught.value.reason == "pool_timeout"
        assert loop.time() - started < min(connect_timeout, deadline) + 0.5
        assert (await first).output == FAITHFUL
    assert len(await sim.calls()) == 1  # the second never reached the provider


async def test_a_full_pool_stays_definite_when_a_late_loop_runs_both_timers_at_once(
    sim: Any, make_request: Callable[..., ProviderRequest]
) -> None:
    """The loop blocked past both the pool's timer (45 ms) and the call's deadline
    (50 ms) runs them in one turn: the waiting call sees one cancellation for two
    timers, which ``asyncio.timeout`` hands to the deadline. Nothing was sent, so the
    call is still ``ConnectFailed``, not ``TimedOut``."""
    await sim.script({"kind": "delay", "seconds": 1.0})
    config = sim.config("sim-main", "openai")
    async with provider_client(httpx.Limits(max_connections=1)) as client:
        adapter = build_provider(config, client)
        first = asyncio.create_task(adapter.call(make_request(timeout=5.0)))
        await asyncio.sleep(0.1)  # the first call holds the pool's one connection
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, time.sleep, 0.2)  # the loop runs late past both timers
        with pytest.raises(ConnectFailed) as caught:
            await adapter.call(make_request(timeout=0.05))
        assert caught.value.reason == "pool_timeout"
        assert (await first).output == FAITHFUL
    assert len(await sim.calls()) == 1


async def test_a_cancel_from_outside_in_the_pools_timeout_turn_stays_a_cancellation(
    sim: Any, make_request: Callable[..., ProviderRequest]
) -> None:
    """A shutdown's cancel that lands in the turn the pool's timer fires in is not read
    as the pool's timeout: the call ends cancelled, as its caller asked."""
    await sim.script({"kind": "delay", "seconds": 1.0})
    config = sim.config("sim-main", "openai").model_copy(update={"connect_timeout": 0.05})
    async with provider_client(httpx.Limits(max_connections=1)) as client:
        adapter = build_provider(config, client)
        first = asyncio.create_task(adapter.call(make_request(timeout=5.0)))
        await asyncio.sleep(0.1)
        loop = asyncio.get_running_loop()
        second = asyncio.create_task(adapter.call(make_request(timeout=5.0)))
        loop.call_later(0.01, time.sleep, 0.2)
        loop.call_later(0.02, second.cancel)  # due in the same late turn as the pool's timer
        with pytest.raises(asyncio.CancelledError):
            await second
        assert (await first).output == FAITHFUL
    assert len(await sim.calls()) == 1
