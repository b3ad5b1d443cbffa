"""The simulator's OpenAI stored completions: what ``store: true`` keeps and the list finds."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from providers.simulator import create_sim_app
from providers.simulator.app import SimulatorApp
from providers.simulator.server import run_simulator

TLS = ssl.create_default_context()
LATE = 3.0  # seconds the provider takes, well past the client's 0.2 s
USER = 'Do it.\n<input contract="echo@1">\n{"n": 5}\n</input>'


class Echo:
    def simulate(self, input: Any) -> dict[str, Any]:
        return {"echo": input["n"]}


@pytest.fixture
def app() -> SimulatorApp:
    return create_sim_app(catalog={"echo@1": Echo()})


@pytest.fixture
async def client(app: SimulatorApp) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sim", verify=TLS) as c:
        yield c


def body(key: str | None, store: Any = True) -> dict[str, Any]:
    data: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "system", "content": "JSON"}, {"role": "user", "content": USER}],
        "store": store,
    }
    if key is not None:
        data["metadata"] = {"onejob_key": key}
    return data


async def listing(client: httpx.AsyncClient, key: str, **params: str) -> dict[str, Any]:
    response = await client.get(
        "/p/a/v1/chat/completions", params={"metadata[onejob_key]": key, **params}
    )
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


async def test_a_stored_completion_is_listed_by_its_metadata_with_the_answer_sent(
    client: httpx.AsyncClient,
) -> None:
    sent = (await client.post("/p/a/v1/chat/completions", json=body("job_1/1"))).json()
    await client.post("/p/a/v1/chat/completions", json=body("job_2/1"))
    found = await listing(client, "job_1/1")
    assert [c["id"] for c in found["data"]] == [sent["id"]]
    assert found["data"][0]["choices"] == sent["choices"]
    assert found["has_more"] is False and found["first_id"] == sent["id"]
    [call, _] = (await client.get("/_sim/calls")).json()["calls"]
    assert call["stored_id"] == sent["id"]


async def test_without_store_nothing_is_kept_and_other_providers_see_nothing(
    client: httpx.AsyncClient,
) -> None:
    await client.post("/p/a/v1/chat/completions", json=body("k/1", store=False))
    await client.post("/p/b/v1/chat/completions", json=body("k/2"))
    assert (await listing(client, "k/1"))["data"] == []
    assert (await listing(client, "k/2"))["data"] == []  # stored under provider b, not a


async def test_the_list_pages_with_after_and_has_more(client: httpx.AsyncClient) -> None:
    ids = [
        (await client.post("/p/a/v1/chat/completions", json=body("same"))).json()["id"]
        for _ in range(3)
    ]
    first = await listing(client, "same", limit="2")
    assert [c["id"] for c in first["data"]] == ids[:2] and first["has_more"] is True
    rest = await listing(client, "same", limit="2", after=first["last_id"])
    assert [c["id"] for c in rest["data"]] == ids[2:] and rest["has_more"] is False


async def test_a_completion_finished_after_the_client_gave_up_is_still_stored() -> None:
    async with (
        run_simulator(port=0, catalog={"echo@1": Echo()}) as sim,
        httpx.AsyncClient(base_url=sim.base_url) as real,
    ):
        delay = {"kind": "delay", "seconds": LATE}
        await real.post("/_sim/script", json={"provider": "a", "behaviours": [delay]})
        with pytest.raises(httpx.ReadTimeout):
            await real.post("/p/a/v1/chat/completions", json=body("late/1"), timeout=0.2)
        assert (await listing(real, "late/1"))["data"] == []  # the provider is still at it
        for _ in range(int(LATE * 20) + 100):  # then it finishes, with nobody listening
            if (await listing(real, "late/1"))["data"]:
                break
            await asyncio.sleep(0.05)
        [stored] = (await listing(real, "late/1"))["data"]
        [call] = (await real.get("/_sim/calls")).json()["calls"]
        assert call["stored_id"] == stored["id"]


async def test_a_request_dropped_unprocessed_breaks_the_connection_and_stores_nothing() -> None:
    async with (
        run_simulator(port=0, catalog={"echo@1": Echo()}) as sim,
        httpx.AsyncClient(base_url=sim.base_url) as real,
    ):
        await real.post(
            "/_sim/script", json={"provider": "a", "behaviours": [{"kind": "drop_unprocessed"}]}
        )
        with pytest.raises(httpx.RemoteProtocolError):
            await real.post("/p/a/v1/chat/completions", json=body("lost/1"))
        assert (await listing(real, "lost/1"))["data"] == []
        [call] = (await real.get("/_sim/calls")).json()["calls"]
        assert call["outcome"] == "dropped_unprocessed" and call["stored_id"] is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("store", "yes"),
        ("metadata", {"k": 1}),
        ("metadata", {"k" * 65: "v"}),
        ("metadata", {"k": "v" * 513}),
        ("metadata", {f"k{i}": "v" for i in range(17)}),
    ],
)
async def test_store_and_metadata_are_refused_as_openai_refuses_them(
    client: httpx.AsyncClient, field: str, value: Any
) -> None:
    data = body(None)
    data[field] = value
    response = await client.post("/p/a/v1/chat/completions", json=data)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


async def test_the_list_refuses_arguments_openai_does_not_know(client: httpx.AsyncClient) -> None:
    response = await client.get("/p/a/v1/chat/completions", params={"limit": "0"})
    assert response.status_code == 400
    response = await client.get("/p/a/v1/chat/completions", params={"colour": "red"})
    assert response.status_code == 400


async def test_reset_forgets_stored_completions(
    client: httpx.AsyncClient, app: SimulatorApp
) -> None:
    await client.post("/p/a/v1/chat/completions", json=body("r/1"))
    await client.post("/_sim/reset")
    assert (await listing(client, "r/1"))["data"] == []
