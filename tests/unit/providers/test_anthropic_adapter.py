from __future__ import annotations

import json
import ssl
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import respx

from providers.base import BadOutput, ProviderRequest, Refused
from providers.config import ProviderConfig
from providers.factory import adapter_version, build_provider

#: One TLS context for the module: building one per client costs ~80 ms.
TLS = ssl.create_default_context()


def tool_body(wire: Any, input: Any, stop: str = "tool_use") -> dict[str, Any]:
    body = wire.body("anthropic", "")
    body["content"] = [
        {"type": "tool_use", "id": "toolu_01", "name": "ticket_triage_v1", "input": input}
    ]
    body["stop_reason"] = stop
    return body


async def _call(config: ProviderConfig, request: ProviderRequest) -> Any:
    async with httpx.AsyncClient(verify=TLS) as client:
        return await build_provider(config, client).call(request)


async def test_anthropic_request_uses_top_level_system_and_forces_the_schema_tool(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    with respx.mock() as router:
        route = router.post(wire.endpoints["anthropic"]).respond(json=tool_body(wire, wire.answer))
        await _call(make_config("anthropic"), make_request(temperature=0.3))
    sent = route.calls.last.request
    body = json.loads(sent.content)
    assert body["system"] == "You triage support tickets. Answer with JSON only."
    assert body["messages"] == [{"role": "user", "content": make_request().user}]
    assert all(m["role"] != "system" for m in body["messages"])
    assert body["tools"] == [
        {
            "name": "ticket_triage_v1",
            "description": "Record the answer in exactly this structure.",
            "input_schema": wire.schema,
        }
    ]
    assert body["tool_choice"] == {"type": "tool", "name": "ticket_triage_v1"}
    assert body["max_tokens"] == 256
    assert body["temperature"] == 0.3
    assert body["model"] == "m-1"
    assert sent.headers["x-api-key"] == wire.secret
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["idempotency-key"] == "job_01J/1"
    assert "authorization" not in sent.headers


async def test_anthropic_tool_input_is_the_output(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    with respx.mock() as router:
        router.post(wire.endpoints["anthropic"]).respond(
            json=tool_body(wire, wire.answer), headers={"request-id": "req_011"}
        )
        result = await _call(make_config("anthropic"), make_request())
    assert result.output == wire.answer
    assert json.loads(result.raw_text) == wire.answer
    assert result.request_id == "req_011"
    assert result.finish_reason == "tool_use"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (51, 9)
    assert result.model == "m-1-20250101"


async def test_anthropic_text_answer_must_be_json_by_itself(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    with respx.mock() as router:
        router.post(wire.endpoints["anthropic"]).respond(
            json=wire.body("anthropic", json.dumps(wire.answer))
        )
        result = await _call(make_config("anthropic"), make_request())
        assert result.output == wire.answer
        assert result.request_id == "msg_01abc"
        router.post(wire.endpoints["anthropic"]).respond(
            json=wire.body("anthropic", "Here: " + json.dumps(wire.answer))
        )
        with pytest.raises(BadOutput) as caught:
            await _call(make_config("anthropic"), make_request())
    assert caught.value.reason == "not_json"


@pytest.mark.parametrize("stop", ["max_tokens", "refusal"])
async def test_anthropic_stop_reason_max_tokens_or_refusal_is_a_refusal(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    stop: str,
) -> None:
    with respx.mock() as router:
        router.post(wire.endpoints["anthropic"]).respond(
            json=tool_body(wire, {"category": "billing"}, stop=stop)
        )
        with pytest.raises(Refused) as caught:
            await _call(make_config("anthropic"), make_request())
    assert caught.value.reason == stop


async def test_anthropic_answer_with_no_tool_and_no_text_is_empty_bad_output(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    body = wire.body("anthropic", "")
    body["content"] = []
    with respx.mock() as router:
        router.post(wire.endpoints["anthropic"]).respond(json=body)
        with pytest.raises(BadOutput) as caught:
            await _call(make_config("anthropic"), make_request())
    assert caught.value.reason == "empty"


def test_anthropic_adapter_version_is_pinned() -> None:
    assert adapter_version("anthropic") == "anthropic/2"
