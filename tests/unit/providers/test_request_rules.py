"""One row per request rule: what the real API refuses, the simulator refuses the same way.

Each row takes a request the adapter really builds for a catalog case, breaks one rule, and
expects the real API's status and error type/code in its own envelope. The adapters never
send such a request: every catalog request they build passes their protocol's rules.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from contracts.loader import load_catalog
from providers.base import ProviderRequest, Rejected, RequestRefused
from providers.config import ProviderConfig
from providers.factory import build_provider
from providers.simulator import create_sim_app

CATALOG = load_catalog()
TRIAGE = CATALOG["ticket-triage@1"]
MODELS = {
    "openai": "gpt-4o-2024-08-06",
    "anthropic": "claude-sonnet-4-6",
    "gemini": "gemini-2.5-flash",
    "openai-compatible": "qwen2.5:7b-instruct",
}
BASE = {
    "openai": "http://sim/p/x/v1",
    "anthropic": "http://sim/p/x",
    "gemini": "http://sim/p/x",
    "openai-compatible": "http://sim/p/x/v1",
}


def config(protocol: str, model: str | None = None, **extra: Any) -> ProviderConfig:
    return ProviderConfig(
        name="x",
        protocol=protocol,
        base_url=BASE[protocol],
        model=model or MODELS[protocol],
        **extra,
    )


def built(
    protocol: str, model: str | None = None, contract: Any = TRIAGE
) -> tuple[str, dict[str, Any]]:
    adapter: Any = build_provider(config(protocol, model), httpx.AsyncClient())
    request = contract.provider_request(
        contract.cases[0].input, model=model or MODELS[protocol], timeout=5.0, idempotency_key=None
    )
    url, _, body = adapter.build(request)
    return url, body


def check(protocol: str, body: dict[str, Any]) -> None:
    """Run the adapter's own check (``prepare``'s) on ``body``."""
    adapter: Any = build_provider(config(protocol), httpx.AsyncClient())
    adapter.check(body)


Break = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Break:
    def apply(body: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = body
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if value is _DELETE:
            del node[last]
        else:
            node[int(last) if last.isdigit() else last] = value

    return apply


_DELETE = object()
UNTYPED = TRIAGE.output_schema

# (protocol, model or None, break, status, error type, code or None, message fragment)
RULES: list[tuple[str, str | None, Break, int, str, str | None, str]] = [
    # OpenAI Chat Completions
    ("openai", None, _set("model", _DELETE), 400, "invalid_request_error", None,
     "you must provide a model parameter"),
    ("openai", None, _set("messages", _DELETE), 400, "invalid_request_error",
     "missing_required_parameter", "Missing required parameter: 'messages'."),
    ("openai", None, _set("messages", []), 400, "invalid_request_error", "empty_array",
     "empty array"),
    ("openai", None, _set("messages.0.role", "narrator"), 400, "invalid_request_error",
     "invalid_value", "Invalid value: 'narrator'."),
    ("openai", None, _set("messages.0.role", "tool"), 400, "invalid_request_error", None,
     "messages with role 'tool' must be a response"),
    ("openai", None, _set("temperature", 2.5), 400, "invalid_request_error",
     "decimal_above_max_value", "Expected a value <= 2"),
    ("openai", None, _set("temperature", -1), 400, "invalid_request_error",
     "decimal_below_min_value", "Expected a value >= 0"),
    ("openai", "o3-mini", _set("temperature", 0), 400, "invalid_request_error",
     "unsupported_value", "'temperature' does not support 0 with this model"),
    ("openai", "o3-mini", lambda b: (_set("max_tokens", 10)(b), b.pop("temperature")), 400,
     "invalid_request_error", "unsupported_parameter", "Use 'max_completion_tokens' instead."),
    ("openai", None, _set("max_completion_tokens", 0), 400, "invalid_request_error",
     "integer_below_min_value", "Expected a value >= 1"),
    ("openai", None, _set("stream_options", {"include_usage": True}), 400,
     "invalid_request_error", None, "only allowed when 'stream' is enabled"),
    ("openai", None, _set("speed", "fast"), 400, "invalid_request_error", None,
     "Unrecognized request argument supplied: speed"),
    ("openai", None, _set("response_format.json_schema.name", "ticket triage"), 400,
     "invalid_request_error", "invalid_value", "string does not match pattern"),
    ("openai", None, _set("response_format.json_schema.name", "t" * 65), 400,
     "invalid_request_error", "string_above_max_length", "maximum length 64"),
    ("openai", None, _set("response_format.json_schema.schema", UNTYPED), 400,
     "invalid_request_error", "invalid_json_schema",
     "In context=('properties', 'category'), schema must have a 'type' key."),
    ("openai", None, _set("response_format.json_schema.schema.additionalProperties", _DELETE),
     400, "invalid_request_error", "invalid_json_schema",
     "'additionalProperties' is required to be supplied and to be false."),
    ("openai", None, _set("response_format.json_schema.schema.required", ["category"]), 400,
     "invalid_request_error", "invalid_json_schema", "Missing 'priority'."),
    ("openai", None, _set("response_format.json_schema.schema.properties.summary.format", "uri"),
     400, "invalid_request_error", "invalid_json_schema", "'uri' is not a valid format."),
    ("openai", None, _set("response_format.json_schema.schema.allOf", [{"type": "object"}]),
     400, "invalid_request_error", "invalid_json_schema", "'allOf' is not permitted."),
    ("openai", "ft:gpt-4o-2024-08-06:acme::x1", lambda b: None, 400, "invalid_request_error",
     "invalid_json_schema", "'minLength' is not permitted."),
    ("openai", None, _set("response_format", {"type": "json_object"}), 200, "", None, ""),
    # Anthropic Messages
    ("anthropic", None, _set("max_tokens", _DELETE), 400, "invalid_request_error", None,
     "max_tokens: Field required"),
    ("anthropic", None, _set("model", _DELETE), 400, "invalid_request_error", None,
     "model: Field required"),
    ("anthropic", None, _set("max_tokens", 0), 400, "invalid_request_error", None,
     "greater than or equal to 1"),
    ("anthropic", None, _set("temperature", 1.5), 400, "invalid_request_error", None,
     "temperature: Input should be less than or equal to 1"),
    ("anthropic", "claude-opus-4-7", _set("temperature", 0), 400, "invalid_request_error", None,
     "`temperature` is deprecated for this model."),
    ("anthropic", None, _set("messages.0.role", "system"), 400, "invalid_request_error", None,
     'Unexpected role "system"'),
    ("anthropic", None, _set("messages.0.role", "tool"), 400, "invalid_request_error", None,
     "Input should be 'user' or 'assistant'"),
    ("anthropic", None, _set("frequency_penalty", 1), 400, "invalid_request_error", None,
     "frequency_penalty: Extra inputs are not permitted"),
    ("anthropic", None, _set("tools.0.name", "ticket triage"), 400, "invalid_request_error", None,
     "String should match pattern"),
    ("anthropic", None, _set("tools.0.input_schema.type", "array"), 400,
     "invalid_request_error", None, "input_schema.type: Input should be 'object'"),
    ("anthropic", None, _set("tool_choice.name", "other"), 400, "invalid_request_error", None,
     "Tool 'other' not found"),
    ("anthropic", None, _set("tools", _DELETE), 400, "invalid_request_error", None,
     "tool_choice may only be specified while providing tools."),
    # Gemini generateContent
    ("gemini", None, _set("contents", _DELETE), 400, "INVALID_ARGUMENT", None,
     "contents is not specified"),
    ("gemini", None, _set("contents.0.role", "assistant"), 400, "INVALID_ARGUMENT", None,
     "Please use a valid role: user, model."),
    ("gemini", None, _set("generationConfig.temperature", 3), 400, "INVALID_ARGUMENT", None,
     "temperature must be in the range"),
    ("gemini", None, _set("generationConfig.maxTokens", 10), 400, "INVALID_ARGUMENT", None,
     'Unknown name "maxTokens" at \'generation_config\': Cannot find field.'),
    ("gemini", None, _set("generationConfig.responseSchema", UNTYPED), 400, "INVALID_ARGUMENT",
     None, 'Unknown name "$schema" at \'generation_config.response_schema\''),
    ("gemini", None, _set("generationConfig.responseSchema.properties.priority.type", "INTEGER"),
     400, "INVALID_ARGUMENT", None, ".enum: only allowed for STRING type"),
    ("gemini", None, _set("generationConfig.responseSchema.additionalProperties", True), 400,
     "INVALID_ARGUMENT", None, "additionalProperties is only supported in Gemini Enterprise"),
    ("gemini", None, _set("generationConfig.responseMimeType", "text/plain"), 400,
     "INVALID_ARGUMENT", None, "response_mime_type must be one of"),
]  # fmt: skip


def _error_fields(protocol: str, payload: dict[str, Any]) -> tuple[str, str | None, str]:
    if protocol == "openai":
        e = payload["error"]
        assert set(e) == {"message", "type", "param", "code"}
        return e["type"], e["code"], e["message"]
    if protocol == "anthropic":
        assert payload["type"] == "error" and payload["request_id"].startswith("req_")
        e = payload["error"]
        return e["type"], None, e["message"]
    e = payload["error"]
    assert set(e) == {"code", "message", "status"}
    return e["status"], None, e["message"]


@pytest.mark.parametrize(
    ("protocol", "model", "breaks", "status", "kind", "code", "fragment"),
    RULES,
    ids=[f"{r[0]}-{i}-{r[6][:40]}" for i, r in enumerate(RULES)],
)
async def test_simulator_refuses_what_the_real_api_refuses_with_its_status_and_envelope(
    protocol: str,
    model: str | None,
    breaks: Break,
    status: int,
    kind: str,
    code: str | None,
    fragment: str,
) -> None:
    url, body = built(
        protocol, model if not (model or "").startswith(("o3", "claude-opus-4-7")) else None
    )
    body = copy.deepcopy(body)
    if model is not None:
        body["model"] = model
        if protocol == "gemini":
            url = url.replace(MODELS[protocol], model)
    breaks(body)
    transport = httpx.ASGITransport(app=create_sim_app(catalog=CATALOG))
    async with httpx.AsyncClient(transport=transport) as client:
        response = await client.post(url, json=body)
    assert response.status_code == status, response.text
    if status == 200:
        return
    got_kind, got_code, message = _error_fields(protocol, response.json())
    assert (got_kind, got_code) == (kind, code)
    assert fragment in message
    with pytest.raises(RequestRefused) as caught:  # and the adapter's own check agrees
        check(protocol, body)
    assert caught.value.status == status and fragment in caught.value.message


@pytest.mark.parametrize("protocol", sorted(MODELS))
@pytest.mark.parametrize("model", [None, "o4-mini", "claude-opus-4-7", "claude-sonnet-5"])
@pytest.mark.parametrize("name", sorted(CATALOG))
def test_adapters_never_build_a_catalog_request_the_api_would_refuse(
    protocol: str, model: str | None, name: str
) -> None:
    _, body = built(protocol, model, CATALOG[name])
    check(protocol, body)


def test_adapter_omits_temperature_where_the_model_refuses_it_and_says_so() -> None:
    for protocol, model in (("anthropic", "claude-opus-4-7"), ("openai", "o3-mini")):
        adapter: Any = build_provider(config(protocol, model), httpx.AsyncClient())
        request = ProviderRequest(
            system="s", user="u", output_schema=TRIAGE.output_schema,
            schema_name="ticket_triage_v1", model=model, temperature=0.0,
        )  # fmt: skip
        _, _, body = adapter.build(request)
        assert "temperature" not in body and adapter.omitted(request) == ("temperature",)
    adapter = build_provider(config("anthropic", "claude-sonnet-4-6"), httpx.AsyncClient())
    _, _, body = adapter.build(request)  # type: ignore[attr-defined]
    assert body["temperature"] == 0.0 and adapter.omitted(request) == ()  # type: ignore[attr-defined]


def test_config_overrides_the_temperature_capability_either_way() -> None:
    def takes_temperature(provider: ProviderConfig) -> bool:
        adapter: Any = build_provider(provider, httpx.AsyncClient())
        return bool(adapter.capabilities.temperature)

    refusing = config("anthropic", "claude-sonnet-4-6", capabilities={"temperature": False})
    assert takes_temperature(refusing) is False
    taking = config("anthropic", "claude-opus-4-7", capabilities={"temperature": True})
    assert takes_temperature(taking) is True
    assert takes_temperature(config("anthropic", "claude-opus-4-7")) is False
    assert takes_temperature(config("gemini")) is True
    assert takes_temperature(config("openai-compatible", "o3-mini")) is True
    assert takes_temperature(config("openai", "o3-mini")) is False


@pytest.mark.parametrize(
    ("protocol", "base_url", "hint"),
    [
        ("openai", "http://sim/p/x", "does base_url end in /v1?"),
        ("anthropic", "http://sim/p/x/v1", "base_url must not end in /v1"),
        ("gemini", "http://sim/p/x/v1beta", "base_url must not include the API version"),
    ],
)
async def test_a_404_from_a_wrong_base_url_carries_a_hint(
    protocol: str, base_url: str, hint: str
) -> None:
    transport = httpx.ASGITransport(app=create_sim_app(catalog=CATALOG))
    wrong = config(protocol).model_copy(update={"base_url": base_url})
    async with httpx.AsyncClient(transport=transport) as client:
        adapter = build_provider(wrong, client)
        request = TRIAGE.provider_request(
            TRIAGE.cases[0].input, model=MODELS[protocol], timeout=5.0, idempotency_key=None
        )
        with pytest.raises(Rejected) as caught:
            await adapter.call(request)
    assert caught.value.status_code == 404
    assert caught.value.hint is not None and hint in caught.value.hint
    assert hint in str(caught.value)


async def test_a_call_to_a_model_that_refuses_temperature_succeeds_and_reports_the_omission() -> (
    None
):
    transport = httpx.ASGITransport(app=create_sim_app(catalog=CATALOG))
    async with httpx.AsyncClient(transport=transport) as client:
        adapter = build_provider(config("anthropic", "claude-opus-4-7"), client)
        request = TRIAGE.provider_request(
            TRIAGE.cases[0].input, model="claude-opus-4-7", timeout=5.0, idempotency_key=None
        )
        result = await adapter.call(request)
    assert result.output == TRIAGE.simulate(TRIAGE.cases[0].input)
    assert result.omitted_parameters == ("temperature",)


async def test_an_untranslatable_schema_is_rejected_before_anything_is_sent() -> None:
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda r: (sent.append(r), httpx.Response(500))[1])
    async with httpx.AsyncClient(transport=transport) as client:
        adapter = build_provider(config("openai"), client)
        request = ProviderRequest(
            system="s", user="u", schema_name="m", model="gpt-4o",
            output_schema={"type": "object", "additionalProperties": {"type": "string"}},
        )  # fmt: skip
        with pytest.raises(Rejected) as caught:
            await adapter.call(request)
    assert caught.value.reason == "schema_unsupported" and sent == []
