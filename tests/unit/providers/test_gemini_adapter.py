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
from providers.gemini import to_gemini_schema

#: One TLS context for the module: building one per client costs ~80 ms.
TLS = ssl.create_default_context()


async def _call(config: ProviderConfig, request: ProviderRequest) -> Any:
    async with httpx.AsyncClient(verify=TLS) as client:
        return await build_provider(config, client).call(request)


async def test_gemini_request_uses_system_instruction_and_response_schema(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    with respx.mock() as router:
        route = router.post(wire.endpoints["gemini"]).respond(
            json=wire.body("gemini", json.dumps(wire.answer))
        )
        await _call(make_config("gemini"), make_request(temperature=0.1))
    sent = route.calls.last.request
    body = json.loads(sent.content)
    assert body["systemInstruction"] == {
        "parts": [{"text": "You triage support tickets. Answer with JSON only."}]
    }
    assert body["contents"] == [{"role": "user", "parts": [{"text": make_request().user}]}]
    config = body["generationConfig"]
    assert config["temperature"] == 0.1
    assert config["maxOutputTokens"] == 256
    assert config["responseMimeType"] == "application/json"
    assert config["responseSchema"] == {
        "type": "OBJECT",
        "properties": {
            "category": {"type": "STRING", "enum": ["billing", "shipping", "other"]},
            "priority": {"type": "INTEGER"},
        },
        "propertyOrdering": ["category", "priority"],
        "required": ["category", "priority"],
        "additionalProperties": False,
    }
    assert sent.headers["x-goog-api-key"] == wire.secret
    assert wire.secret not in str(sent.url)
    assert sent.headers["idempotency-key"] == "job_01J/1"


async def test_gemini_success_is_parsed_with_response_id_and_usage(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    with respx.mock() as router:
        router.post(wire.endpoints["gemini"]).respond(
            json=wire.body("gemini", json.dumps(wire.answer))
        )
        result = await _call(make_config("gemini"), make_request())
    assert result.output == wire.answer
    assert result.request_id == "resp-abc123"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (51, 9)
    assert result.finish_reason == "STOP"
    assert result.model == "m-1-001"


@pytest.mark.parametrize(
    ("finish", "reason"),
    [
        ("MAX_TOKENS", "max_tokens"),
        ("SAFETY", "safety"),
        ("PROHIBITED_CONTENT", "safety"),
        ("RECITATION", "recitation"),
    ],
)
async def test_gemini_finish_reasons_other_than_stop_are_refusals(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    finish: str,
    reason: str,
) -> None:
    with respx.mock() as router:
        router.post(wire.endpoints["gemini"]).respond(json=wire.body("gemini", '{"cat', finish))
        with pytest.raises(Refused) as caught:
            await _call(make_config("gemini"), make_request())
    assert caught.value.reason == reason


async def test_gemini_blocked_prompt_without_candidates_is_a_safety_refusal(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    with respx.mock() as router:
        router.post(wire.endpoints["gemini"]).respond(
            json={"promptFeedback": {"blockReason": "SAFETY"}}
        )
        with pytest.raises(Refused) as caught:
            await _call(make_config("gemini"), make_request())
    assert caught.value.reason == "safety"


async def test_gemini_thought_parts_are_not_part_of_the_answer(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    body = wire.body("gemini", json.dumps(wire.answer))
    body["candidates"][0]["content"]["parts"].insert(0, {"text": "thinking...", "thought": True})
    with respx.mock() as router:
        router.post(wire.endpoints["gemini"]).respond(json=body)
        result = await _call(make_config("gemini"), make_request())
    assert result.output == wire.answer


async def test_gemini_prose_is_bad_output(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    with respx.mock() as router:
        router.post(wire.endpoints["gemini"]).respond(
            json=wire.body("gemini", "The answer is billing.")
        )
        with pytest.raises(BadOutput) as caught:
            await _call(make_config("gemini"), make_request())
    assert caught.value.reason == "not_json"


def test_gemini_schema_translation_drops_annotations_keeps_closed_objects_and_resolves_refs() -> (
    None
):
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": False,
        "$defs": {"Line": {"type": "object", "properties": {"qty": {"type": "integer"}}}},
        "properties": {
            "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}},
            "note": {"type": ["string", "null"]},
            "kind": {"const": "invoice"},
            "total": {"anyOf": [{"type": "number"}, {"type": "null"}]},
        },
        "required": ["lines"],
    }
    assert to_gemini_schema(schema) == {
        "type": "OBJECT",
        "properties": {
            "lines": {
                "type": "ARRAY",
                "items": {
                    "type": "OBJECT",
                    "properties": {"qty": {"type": "INTEGER"}},
                },
            },
            "note": {"type": "STRING", "nullable": True},
            "kind": {"type": "STRING", "enum": ["invoice"]},
            "total": {"type": "NUMBER", "nullable": True},
        },
        "propertyOrdering": ["lines", "note", "kind", "total"],
        "required": ["lines"],
        "additionalProperties": False,
    }


def test_gemini_adapter_version_is_pinned() -> None:
    assert adapter_version("gemini") == "gemini/2"
