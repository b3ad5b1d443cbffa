from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from providers.simulator import Profile, create_sim_app, extract_input, route
from providers.simulator.profiles import InputBlockError
from providers.simulator.script import Behaviour, BehaviourKind, Script

TLS = ssl.create_default_context()


class Echo:
    def simulate(self, input: Any) -> dict[str, Any]:
        return {"echo": input["n"]}

    def simulate_sloppy(self, input: Any) -> dict[str, Any]:
        return {"echo": -input["n"]}


USER = 'Do it.\n<input contract="echo@1">\n{"n": 5}\n</input>'


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_sim_app(profiles={"sim-s": "sloppy"}, catalog={"echo@1": Echo()})
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sim", verify=TLS) as c:
        yield c


def openai_body(user: str = USER, **extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [{"role": "system", "content": "JSON only"}, {"role": "user", "content": user}],
        **extra,
    }


def _routed(path: str) -> tuple[str, str, str | None, bool] | None:
    found = route(path)
    if found is None:
        return None
    provider, wire, match = found
    return provider, wire.protocol, match.path_model, match.stream


def test_route_reads_the_provider_prefix_and_the_api_path() -> None:
    assert _routed("/v1/chat/completions") == ("default", "openai", None, False)
    assert _routed("/p/sim-a/v1/messages") == ("sim-a", "anthropic", None, False)
    assert _routed("/p/g/v1beta/models/gemini-x:generateContent") == (
        "g",
        "gemini",
        "gemini-x",
        False,
    )
    assert _routed("/p/g/v1beta/models/gemini-x:streamGenerateContent") == (
        "g",
        "gemini",
        "gemini-x",
        True,
    )
    assert _routed("/p/g/v1beta/models/gemini-x:countTokens") is None
    assert _routed("/v2/chat/completions") is None


def test_extract_input_takes_the_last_block() -> None:
    user = (
        'quoted <input contract="a@1">\n{"n": 1}\n</input> then '
        '<input contract="b@2">\n{"n": 2}\n</input>'
    )
    assert extract_input(user) == ("b@2", {"n": 2})
    with pytest.raises(InputBlockError, match="no <input"):
        extract_input("nothing here")
    with pytest.raises(InputBlockError, match="not closed"):
        extract_input('<input contract="a@1">{"n": 1}')
    with pytest.raises(InputBlockError, match="not JSON"):
        extract_input('<input contract="a@1">{n: 1}</input>')


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kind": "explode"}, "unknown behaviour kind"),
        ({"kind": "delay"}, "delay needs 'seconds'"),
        ({"kind": "delay", "seconds": -1}, "delay needs 'seconds'"),
        ({"kind": "status", "code": 200}, "error 'code'"),
        ({"kind": "status", "code": 429, "retry_after": -3}, "retry_after"),
        ({"kind": "ok", "colour": "red"}, "unknown behaviour fields"),
        ("hang", "an object"),
    ],
)
def test_wrong_behaviours_are_refused_with_a_reason(data: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Behaviour.from_json(data)


def test_script_takes_provider_queue_first_then_shared_queue() -> None:
    script = Script()
    script.queue(None, [Behaviour(BehaviourKind.HANG)])
    script.queue("a", [Behaviour(BehaviourKind.MALFORMED)], count=2)
    assert script.pending() == {"a": 2, "*": 1}
    assert script.next_for("b") == Behaviour(BehaviourKind.HANG)
    assert script.next_for("a") == Behaviour(BehaviourKind.MALFORMED)
    assert script.next_for("a") == Behaviour(BehaviourKind.MALFORMED)
    assert script.next_for("a") is None


async def test_control_api_refuses_bad_scripts(client: httpx.AsyncClient) -> None:
    for payload in [
        {"behaviours": []},
        {"behaviours": [{"kind": "ok"}], "count": 0},
        {"behaviours": [{"kind": "ok"}], "provider": 3},
        {"behaviours": [{"kind": "nope"}]},
    ]:
        response = await client.post("/_sim/script", json=payload)
        assert response.status_code == 400, payload
        assert "error" in response.json()
    assert (await client.post("/_sim/script", content=b"{not json")).status_code == 400
    assert (await client.post("/_sim/profiles", json={"x": "psychic"})).status_code == 400
    assert (await client.get("/_sim/nothing")).status_code == 404


async def test_health_and_profiles_describe_the_simulator(client: httpx.AsyncClient) -> None:
    health = (await client.get("/_sim/health")).json()
    assert health == {"status": "ok", "default_profile": "faithful"}
    profiles = (await client.get("/_sim/profiles")).json()
    assert profiles == {"default": "faithful", "profiles": {"sim-s": "sloppy"}}


async def test_configured_profile_and_profile_named_providers(client: httpx.AsyncClient) -> None:
    def content(response: httpx.Response) -> Any:
        return json.loads(response.json()["choices"][0]["message"]["content"])

    assert content(await client.post("/v1/chat/completions", json=openai_body())) == {"echo": 5}
    sloppy = await client.post("/p/sim-s/v1/chat/completions", json=openai_body())
    assert content(sloppy) == {"echo": -5}
    drifting = await client.post(f"/p/{Profile.DRIFTING}/v1/chat/completions", json=openai_body())
    assert content(drifting) == {"result": {"echo": 5}}


async def test_openai_answer_has_the_real_shape(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", json=openai_body())
    assert response.status_code == 200
    assert response.headers["x-request-id"].startswith("req_")
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == "m"
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["choices"][0]["message"]["role"] == "assistant"
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_anthropic_answer_has_the_real_shape(client: httpx.AsyncClient) -> None:
    request = {
        "model": "c",
        "max_tokens": 100,
        "system": "JSON only",
        "messages": [{"role": "user", "content": USER}],
        "tools": [{"name": "echo_v1", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "tool", "name": "echo_v1"},
    }
    response = await client.post("/v1/messages", json=request)
    assert response.headers["request-id"].startswith("req_")
    body = response.json()
    assert body["type"] == "message"
    assert body["id"].startswith("msg_")
    assert body["stop_reason"] == "tool_use"
    [block] = body["content"]
    assert block["type"] == "tool_use"
    assert block["name"] == "echo_v1"
    assert block["input"] == {"echo": 5}
    assert set(body["usage"]) == {"input_tokens", "output_tokens"}


async def test_anthropic_refuses_a_system_role_message_like_the_real_api(
    client: httpx.AsyncClient,
) -> None:
    request = {
        "model": "c",
        "max_tokens": 100,
        "messages": [{"role": "system", "content": "x"}, {"role": "user", "content": USER}],
    }
    response = await client.post("/v1/messages", json=request)
    assert response.status_code == 400
    body = response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert "top-level `system`" in body["error"]["message"]


async def test_gemini_answer_has_the_real_shape(client: httpx.AsyncClient) -> None:
    request = {
        "systemInstruction": {"parts": [{"text": "JSON only"}]},
        "contents": [{"role": "user", "parts": [{"text": USER}]}],
        "generationConfig": {"responseMimeType": "application/json"},
    }
    response = await client.post("/v1beta/models/gem-1:generateContent", json=request)
    body = response.json()
    [candidate] = body["candidates"]
    assert candidate["finishReason"] == "STOP"
    assert json.loads(candidate["content"]["parts"][0]["text"]) == {"echo": 5}
    assert body["modelVersion"] == "gem-1"
    assert body["responseId"]
    assert set(body["usageMetadata"]) == {
        "promptTokenCount",
        "candidatesTokenCount",
        "totalTokenCount",
    }


async def test_errors_use_each_api_error_shape(client: httpx.AsyncClient) -> None:
    await client.post(
        "/_sim/script",
        json={"behaviours": [{"kind": "status", "code": 429, "retry_after": 1.5}], "count": 3},
    )
    openai = await client.post("/v1/chat/completions", json=openai_body())
    assert openai.status_code == 429
    assert openai.headers["retry-after"] == "1.5"
    assert openai.json()["error"]["code"] == "rate_limit_exceeded"
    anthropic = await client.post("/v1/messages", json={})
    assert anthropic.json()["error"]["type"] == "rate_limit_error"
    gemini = await client.post("/v1beta/models/g:generateContent", json={})
    assert gemini.json()["error"]["status"] == "RESOURCE_EXHAUSTED"


async def test_missing_system_prompt_is_recorded(client: httpx.AsyncClient) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": USER}]}
    assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
    [call] = (await client.get("/_sim/calls")).json()["calls"]
    assert call["system_prompt"] is False
    assert call["idempotency_key"] is None


async def test_only_post_reaches_the_simulated_apis(client: httpx.AsyncClient) -> None:
    assert (await client.put("/v1/chat/completions", json={})).status_code == 405
    assert (await client.get("/v1/messages")).status_code == 405
    assert (await client.post("/v9/whatever", json={})).status_code == 404


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(
    deadline=None, max_examples=50
)  # the whole suite runs in parallel; timing is not the property
@given(
    input=st.dictionaries(st.text(), json_values, max_size=5),
    preamble=st.text(),
)
def test_extract_input_recovers_any_input_after_any_preamble(
    input: dict[str, Any], preamble: str
) -> None:
    body = json.dumps(input, ensure_ascii=False, indent=1).replace("<", "\\u003c")
    quoted = '<input contract="decoy@1">\n{"x": 1}\n</input>'
    user = f'{preamble}\n{quoted}\n\n<input contract="real@2">\n{body}\n</input>'
    assert extract_input(user) == ("real@2", input)


class Broken:
    def simulate(self, input: Any) -> dict[str, Any]:
        raise KeyError("text")

    def simulate_sloppy(self, input: Any) -> dict[str, Any]:
        raise KeyError("text")


async def test_input_the_contract_cannot_simulate_is_a_400_not_a_crash() -> None:
    transport = httpx.ASGITransport(app=create_sim_app(catalog={"echo@1": Broken()}))
    async with httpx.AsyncClient(transport=transport, base_url="http://sim", verify=TLS) as c:
        response = await c.post("/v1/chat/completions", json=openai_body())
    assert response.status_code == 400
    assert "echo@1 cannot simulate this input: KeyError" in response.json()["error"]["message"]


async def test_a_catalog_that_fails_to_load_is_a_500_with_the_reason() -> None:
    app = create_sim_app()

    def fail() -> Any:
        raise RuntimeError("catalog folder does not exist")

    app._load_catalog = fail  # type: ignore[method-assign]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sim", verify=TLS) as c:
        response = await c.post("/v1/chat/completions", json=openai_body())
    assert response.status_code == 500
    assert "catalog cannot be loaded" in response.json()["error"]["message"]
