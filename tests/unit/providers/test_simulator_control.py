"""The shipped control client of the simulator, against the simulator app in process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from providers.simulator import create_sim_app
from providers.simulator.control_client import SimulatorControl, SimulatorControlError

USER = 'Do it.\n<input contract="echo@1">\n{"n": 5}\n</input>'


class Echo:
    def simulate(self, input: Any) -> dict[str, Any]:
        return {"echo": input["n"]}

    def simulate_sloppy(self, input: Any) -> dict[str, Any]:
        return {"echo": -input["n"]}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_sim_app(catalog={"echo@1": Echo()}))
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as c:
        yield c


async def ask(client: httpx.AsyncClient, provider: str) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": USER}]}
    return await client.post(f"/p/{provider}/v1/chat/completions", json=body)


async def test_a_refused_script_raises_with_the_simulators_reason(
    client: httpx.AsyncClient,
) -> None:
    control = SimulatorControl(client)
    with pytest.raises(SimulatorControlError, match=r"/_sim/script answered 400: .*unknown"):
        await control.script("sim-a", {"kind": "explode"})


async def test_a_scripted_behaviour_reaches_only_the_named_provider_and_the_log_filters(
    client: httpx.AsyncClient,
) -> None:
    control = SimulatorControl(client)
    await control.script("sim-a", {"kind": "status", "code": 503})
    assert (await ask(client, "sim-b")).status_code == 200
    assert (await ask(client, "sim-a")).status_code == 503
    assert [c["provider"] for c in await control.calls("sim-a")] == ["sim-a"]
    assert len(await control.calls()) == 2


async def test_reset_forgets_calls_and_queued_behaviours(client: httpx.AsyncClient) -> None:
    control = SimulatorControl(client, "http://sim/")
    await control.script(None, {"kind": "status", "code": 500}, count=3)
    await ask(client, "sim-a")
    await control.reset()
    assert await control.calls() == []
    assert (await ask(client, "sim-a")).status_code == 200


async def test_profiles_answers_the_profile_of_every_named_provider(
    client: httpx.AsyncClient,
) -> None:
    profiles = await SimulatorControl(client).profiles(**{"sim-a": "sloppy"})
    assert profiles == {"default": "faithful", "profiles": {"sim-a": "sloppy"}}
    assert (await ask(client, "sim-a")).json()["choices"][0]["message"]["content"] == (
        '{"echo": -5}'
    )
