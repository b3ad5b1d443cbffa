from __future__ import annotations

import json
import logging
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


async def _call(config: ProviderConfig, request: ProviderRequest) -> Any:
    async with httpx.AsyncClient(verify=TLS) as client:
        return await build_provider(config, client).call(request)


async def test_openai_request_puts_system_first_and_asks_for_strict_json_schema(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    config = make_config("openai", extra_headers={"OpenAI-Project": "proj_1"})
    with respx.mock() as router:
        route = router.post(wire.endpoints["openai"]).respond(
            json=wire.body("openai", json.dumps(wire.answer))
        )
        await _call(config, make_request(temperature=0.2))
    sent = route.calls.last.request
    body = json.loads(sent.content)
    assert body["messages"] == [
        {"role": "system", "content": "You triage support tickets. Answer with JSON only."},
        {"role": "user", "content": make_request().user},
    ]
    assert body["model"] == "m-1"
    assert body["temperature"] == 0.2
    assert body["max_completion_tokens"] == 256
    assert "max_tokens" not in body
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "ticket_triage_v1", "schema": wire.schema, "strict": True},
    }
    assert sent.headers["authorization"] == f"Bearer {wire.secret}"
    assert sent.headers["idempotency-key"] == "job_01J/1"
    assert sent.headers["openai-project"] == "proj_1"
    assert sent.headers["content-type"] == "application/json"


async def test_openai_success_is_parsed_with_usage_request_id_and_model(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    with respx.mock() as router:
        router.post(wire.endpoints["openai"]).respond(
            json=wire.body("openai", json.dumps(wire.answer)), headers={"x-request-id": "req_42"}
        )
        result = await _call(make_config("openai"), make_request())
    assert result.output == wire.answer
    assert result.raw_text == json.dumps(wire.answer)
    assert result.request_id == "req_42"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (51, 9)
    assert result.finish_reason == "stop"
    assert result.model == "m-1-2025-01-01"
    assert result.latency >= 0


async def test_openai_request_id_falls_back_to_the_completion_id(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    with respx.mock() as router:
        router.post(wire.endpoints["openai"]).respond(
            json=wire.body("openai", json.dumps(wire.answer))
        )
        result = await _call(make_config("openai"), make_request())
    assert result.request_id == "chatcmpl-abc123"


@pytest.mark.parametrize(
    ("finish", "reason"), [("length", "length"), ("content_filter", "content_filter")]
)
async def test_openai_truncation_and_filtering_are_refusals_with_their_reason(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    finish: str,
    reason: str,
) -> None:
    with respx.mock() as router:
        router.post(wire.endpoints["openai"]).respond(
            json=wire.body("openai", '{"category": "bil', finish)
        )
        with pytest.raises(Refused) as caught:
            await _call(make_config("openai"), make_request())
    assert caught.value.reason == reason
    assert caught.value.outcome == "definite"


async def test_openai_refusal_field_is_a_refusal(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    body = wire.body("openai", "")
    body["choices"][0]["message"].update(content=None, refusal="I can't help with that.")
    with respx.mock() as router:
        router.post(wire.endpoints["openai"]).respond(json=body)
        with pytest.raises(Refused) as caught:
            await _call(make_config("openai"), make_request())
    assert caught.value.reason == "refusal"


async def test_openai_prose_around_json_is_bad_output_not_json(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    text = f"Sure! Here you go:\n```json\n{json.dumps(wire.answer)}\n```"
    with respx.mock() as router:
        router.post(wire.endpoints["openai"]).respond(json=wire.body("openai", text))
        with pytest.raises(BadOutput) as caught:
            await _call(make_config("openai"), make_request())
    assert caught.value.reason == "not_json"
    assert "Sure! Here you go" in (caught.value.body_excerpt or "")


async def test_openai_body_without_choices_is_bad_envelope(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    with respx.mock() as router:
        router.post(wire.endpoints["openai"]).respond(json={"id": "x", "choices": []})
        with pytest.raises(BadOutput) as caught:
            await _call(make_config("openai"), make_request())
    assert caught.value.reason == "bad_envelope"


async def test_openai_answer_given_as_tool_calls_says_so_with_the_function_name(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "ticket_triage_v1", "arguments": '{"category": "billing"}'},
            }
        ],
    }
    body = {"id": "c", "model": "m-1", "choices": [{"index": 0, "message": message}]}
    with respx.mock() as router:
        router.post(wire.endpoints["openai"]).respond(json=body)
        with pytest.raises(BadOutput) as caught:
            await _call(make_config("openai"), make_request())
    assert caught.value.reason == "tool_calls"
    assert "answered with tool_calls (ticket_triage_v1) instead of the JSON answer" in str(
        caught.value
    )
    assert '"name": "ticket_triage_v1"' in (caught.value.body_excerpt or "")


async def test_openai_key_never_reaches_logs(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    with respx.mock() as router:
        router.post(wire.endpoints["openai"]).respond(
            json=wire.body("openai", json.dumps(wire.answer))
        )
        await _call(make_config("openai"), make_request())
    assert caplog.records, "the adapter should log the call"
    assert wire.secret not in caplog.text


def test_openai_adapter_version_is_pinned() -> None:
    assert adapter_version("openai") == "openai/2"
