"""For every catalog case, the adapter sends what the official SDK sends for the same call.

Both requests are captured with a MockTransport (httpx for the adapter, httpx2 for the SDKs)
and compared field by field: method, URL, body, and the headers that carry meaning. The
differences listed in docs/providers.md ("Requests compared with the official SDKs") are
the only ones allowed.
"""

from __future__ import annotations

import copy
import json
from typing import Any, get_args

import anthropic
import httpx
import httpx2
import openai
import pytest
from anthropic.types import ModelParam
from google import genai
from google.genai import types as genai_types

from contracts.loader import load_catalog
from contracts.model import Case, Contract
from providers.anthropic.rules import capabilities as anthropic_capabilities
from providers.config import ProviderConfig
from providers.factory import build_provider
from providers.gemini.schema import to_gemini_schema

CATALOG = load_catalog()
CASES = [
    pytest.param(contract, case, id=f"{name}:{case.id}")
    for name, contract in sorted(CATALOG.items())
    for case in contract.cases
]
KEY = "sk-test-0123456789"
#: Headers that carry meaning for the API (the SDKs add telemetry ones we do not send).
MEANINGFUL = ("content-type", "authorization", "x-api-key", "anthropic-version", "x-goog-api-key")
MODELS = {
    "openai": "gpt-4o-2024-08-06",
    "anthropic": "claude-sonnet-4-6",
    "gemini": "gemini-2.5-flash",
}
BASE = {"openai": "http://sim/p/x/v1", "anthropic": "http://sim/p/x", "gemini": "http://sim/p/x"}


def _capturing(seen: list[httpx2.Request]) -> httpx2.MockTransport:
    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(400, json={"error": {"message": "captured", "type": "x"}})

    return httpx2.MockTransport(answer)


async def adapter_request(
    protocol: str, contract: Contract, case: Case, model: str | None = None
) -> httpx.Request:
    seen: list[httpx.Request] = []
    model = model or MODELS[protocol]

    def capture(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(400, json={"error": {"message": "captured"}})

    config = ProviderConfig(
        name="x", protocol=protocol, base_url=BASE[protocol], model=model,
        api_key_env="ONEJOB_TEST_SDK_KEY",
    )  # fmt: skip
    async with httpx.AsyncClient(transport=httpx.MockTransport(capture)) as client:
        adapter = build_provider(config, client)
        request = contract.provider_request(
            case.input, model=model, timeout=5.0, idempotency_key="job_01/1"
        )
        with pytest.raises(Exception, match="captured"):
            await adapter.call(request)
    [sent] = seen
    return sent


def _meaningful(headers: Any) -> dict[str, str]:
    return {k: headers[k] for k in MEANINGFUL if k in headers}


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONEJOB_TEST_SDK_KEY", KEY)


@pytest.mark.parametrize(("contract", "case"), CASES)
async def test_openai_adapter_sends_what_the_openai_sdk_sends(
    contract: Contract, case: Case
) -> None:
    ours = await adapter_request("openai", contract, case)
    body = json.loads(ours.content)
    seen: list[httpx2.Request] = []
    client = openai.AsyncOpenAI(
        api_key=KEY, base_url=BASE["openai"], max_retries=0,
        http_client=httpx2.AsyncClient(transport=_capturing(seen)),
    )  # fmt: skip
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(
            model=body["model"],
            messages=body["messages"],
            temperature=body["temperature"],
            max_completion_tokens=body["max_completion_tokens"],
            response_format=body["response_format"],
            extra_headers={"Idempotency-Key": "job_01/1"},
        )
    [theirs] = seen
    assert (ours.method, str(ours.url)) == (theirs.method, str(theirs.url))
    assert json.loads(ours.content) == json.loads(theirs.content)
    assert _meaningful(ours.headers) == _meaningful(theirs.headers)
    assert ours.headers["idempotency-key"] == theirs.headers["idempotency-key"]


@pytest.mark.parametrize(("contract", "case"), CASES)
async def test_anthropic_adapter_sends_what_the_anthropic_sdk_sends(
    contract: Contract, case: Case
) -> None:
    ours = await adapter_request("anthropic", contract, case)
    body = json.loads(ours.content)
    # The SDK has no ``temperature`` argument any more; the API still takes it for this
    # model, so it goes as an extra body field (docs/providers.md).
    theirs = await anthropic_sdk_request(body, {"temperature": body["temperature"]})
    _same_anthropic_request(ours, theirs)


#: The Claude models the installed anthropic SDK names (``anthropic.types.ModelParam``).
SDK_CLAUDE_MODELS = list(get_args(get_args(ModelParam)[0]))
#: Those the Messages API still takes ``temperature`` for; every other one answers it with
#: 400 "`temperature` is deprecated for this model." (docs/decisions.md, "`temperature` is
#: omitted where the model refuses it", has the evidence).
TAKES_TEMPERATURE = {
    "claude-opus-4-6", "claude-sonnet-4-6", "claude-haiku-4-5", "claude-haiku-4-5-20251001",
    "claude-opus-4-5", "claude-opus-4-5-20251101", "claude-sonnet-4-5",
    "claude-sonnet-4-5-20250929",
}  # fmt: skip


@pytest.mark.parametrize("model", SDK_CLAUDE_MODELS)
def test_every_model_the_anthropic_sdk_names_has_its_temperature_decided(model: str) -> None:
    """A model a newer SDK adds fails here until it is put on one side or the other."""
    assert anthropic_capabilities(model).temperature is (model in TAKES_TEMPERATURE)


FIRST_CASES = [
    pytest.param(contract, contract.cases[0], id=name) for name, contract in sorted(CATALOG.items())
]


@pytest.mark.parametrize(
    "model",
    ["claude-haiku-4-5", "claude-opus-4-6", "claude-opus-4-7", "claude-opus-4-8",
     "claude-sonnet-5-5", "claude-fable-5-2"],
)  # fmt: skip
@pytest.mark.parametrize(("contract", "case"), FIRST_CASES)
async def test_anthropic_adapter_sends_temperature_exactly_where_the_model_takes_it(
    contract: Contract, case: Case, model: str
) -> None:
    """With the SDK called as a user of that model must call it: temperature or none."""
    ours = await adapter_request("anthropic", contract, case, model=model)
    takes = model in TAKES_TEMPERATURE
    extra = {"temperature": contract.temperature} if takes else None
    theirs = await anthropic_sdk_request(json.loads(ours.content), extra)
    _same_anthropic_request(ours, theirs)
    assert ("temperature" in json.loads(ours.content)) is takes


async def anthropic_sdk_request(
    body: dict[str, Any], extra_body: dict[str, Any] | None
) -> httpx2.Request:
    """The request the anthropic SDK sends for the adapter's call ``body``."""
    seen: list[httpx2.Request] = []
    client = anthropic.AsyncAnthropic(
        api_key=KEY, base_url=BASE["anthropic"], max_retries=0,
        http_client=httpx2.AsyncClient(transport=_capturing(seen)),
    )  # fmt: skip
    with pytest.raises(anthropic.BadRequestError):
        await client.messages.create(
            model=body["model"],
            max_tokens=body["max_tokens"],
            system=body["system"],
            messages=body["messages"],
            tools=body["tools"],
            tool_choice=body["tool_choice"],
            extra_body=extra_body,
            extra_headers={"Idempotency-Key": "job_01/1"},
        )
    [theirs] = seen
    return theirs


def _same_anthropic_request(ours: httpx.Request, theirs: httpx2.Request) -> None:
    assert (ours.method, str(ours.url)) == (theirs.method, str(theirs.url))
    assert json.loads(ours.content) == json.loads(theirs.content)
    # Allowed differences (docs/providers.md): the adapter pins the anthropic-version its
    # parser was written against and sends the key as x-api-key; this SDK sends a newer
    # version and the key as a bearer token.
    mine, sdk = _meaningful(ours.headers), _meaningful(theirs.headers)
    assert mine.pop("anthropic-version") == "2023-06-01"
    assert sdk.pop("anthropic-version") >= "2023-06-01"
    assert mine.pop("x-api-key") == KEY and sdk.pop("authorization") == f"Bearer {KEY}"
    assert mine == sdk


@pytest.mark.parametrize(("contract", "case"), CASES)
async def test_gemini_adapter_sends_what_the_google_genai_sdk_sends(
    contract: Contract, case: Case
) -> None:
    ours = await adapter_request("gemini", contract, case)
    body = json.loads(ours.content)
    config = body["generationConfig"]
    seen: list[httpx2.Request] = []
    options = genai_types.HttpOptions(
        base_url=BASE["gemini"], api_version="v1beta",
        async_client_args={"transport": _capturing(seen)},
        headers={"Idempotency-Key": "job_01/1"},
    )  # fmt: skip
    async with genai.Client(api_key=KEY, http_options=options).aio as client:
        with pytest.raises(genai.errors.ClientError):
            await client.models.generate_content(
                model=MODELS["gemini"],
                contents=[
                    genai_types.Content(
                        role="user",
                        parts=[genai_types.Part(text=body["contents"][0]["parts"][0]["text"])],
                    )
                ],
                config=genai_types.GenerateContentConfig(
                    system_instruction=body["systemInstruction"]["parts"][0]["text"],
                    temperature=config["temperature"],
                    max_output_tokens=config["maxOutputTokens"],
                    response_mime_type=config["responseMimeType"],
                    response_schema=config["responseSchema"],
                ),
            )
    [theirs] = seen
    assert (ours.method, str(ours.url)) == (theirs.method, str(theirs.url))
    sdk = json.loads(theirs.content)
    # Allowed differences (docs/providers.md): the SDK adds ``role: user`` to
    # systemInstruction, and writes nested Schema fields in snake_case.
    assert sdk["systemInstruction"].pop("role") == "user"
    assert sdk["generationConfig"]["responseSchema"] == _snake(config["responseSchema"])
    sdk["generationConfig"]["responseSchema"] = config["responseSchema"]
    assert body == sdk
    assert _meaningful(ours.headers) == _meaningful(theirs.headers)


def _snake(node: Any, top: bool = True) -> Any:
    """The google-genai SDK's spelling of a Schema: nested fields in snake_case."""
    if isinstance(node, list):
        return [_snake(v, False) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        name = "".join(f"_{c.lower()}" if c.isupper() else c for c in key)
        if key == "properties":
            out[name] = {k: _snake(v, False) for k, v in value.items()}
        else:
            out[name] = _snake(value, False)
    return out


#: JSON Schemas in the subset both translations take (no type lists, typed enums): one
#: property (no ordering), nested objects and arrays, bounds, a nullable ``anyOf``.
SHARED_SCHEMAS = [
    {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
    {
        "type": "object",
        "properties": {
            "count": {"type": "integer", "minimum": 0, "maximum": 10},
            "lines": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "object", "properties": {"qty": {"type": "number"}}},
            },
            "note": {"anyOf": [{"type": "string", "maxLength": 20}, {"type": "null"}]},
            "kind": {"type": "string", "enum": ["a", "b"]},
        },
        "required": ["count", "lines"],
        "additionalProperties": False,
    },
]


async def gemini_sdk_config(**config: Any) -> dict[str, Any]:
    """The ``generationConfig`` google-genai sends for ``GenerateContentConfig(**config)``."""
    seen: list[httpx2.Request] = []
    options = genai_types.HttpOptions(
        base_url=BASE["gemini"], api_version="v1beta",
        async_client_args={"transport": _capturing(seen)},
    )  # fmt: skip
    async with genai.Client(api_key=KEY, http_options=options).aio as client:
        with pytest.raises(genai.errors.ClientError):
            await client.models.generate_content(
                model=MODELS["gemini"],
                contents="x",
                config=genai_types.GenerateContentConfig(
                    response_mime_type="application/json", **config
                ),
            )
    [theirs] = seen
    sent: dict[str, Any] = json.loads(theirs.content)["generationConfig"]
    return sent


@pytest.mark.parametrize("schema", SHARED_SCHEMAS, ids=["one property", "nested"])
async def test_gemini_translates_a_json_schema_as_google_genai_does(schema: dict[str, Any]) -> None:
    """google-genai's ``response_schema`` given the same JSON Schema (``process_schema``)."""
    sdk = await gemini_sdk_config(response_schema=copy.deepcopy(schema))
    assert sdk["responseSchema"] == _snake(to_gemini_schema(copy.deepcopy(schema)))


@pytest.mark.parametrize("contract", [pytest.param(c, id=n) for n, c in sorted(CATALOG.items())])
async def test_a_contract_schema_in_google_genai_and_in_the_adapter(contract: Contract) -> None:
    """What the SDK does with a contract's own schema, and why the adapter differs (docs).

    ``response_json_schema`` sends it verbatim as ``responseJsonSchema``: JSON Schema,
    lower-case types, no ``propertyOrdering``. ``response_schema`` cannot take a
    contract's schema as written (``$schema``, type lists); without ``$schema`` it sends
    ours, except that an ``enum`` without ``type`` stays without one.
    """
    schema = contract.output_schema
    sdk = await gemini_sdk_config(response_json_schema=copy.deepcopy(schema))
    assert sdk["responseJsonSchema"] == schema
    assert "responseSchema" not in sdk
    bare = {k: v for k, v in schema.items() if k != "$schema"}
    if any(isinstance(p.get("type"), list) for p in bare["properties"].values()):
        with pytest.raises(AttributeError):  # process_schema upper-cases ``type``
            await gemini_sdk_config(response_schema=copy.deepcopy(bare))
        return
    sdk = await gemini_sdk_config(response_schema=copy.deepcopy(bare))
    assert _typed_enums(sdk["responseSchema"]) == _snake(to_gemini_schema(copy.deepcopy(bare)))


def _typed_enums(node: Any) -> Any:
    """The SDK's schema with ``type: STRING`` on each enum, as the adapter (and the API) has it."""
    if isinstance(node, list):
        return [_typed_enums(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _typed_enums(v) for k, v in node.items()}
    if "enum" in out and "type" not in out:
        out["type"] = "STRING"
    return out
