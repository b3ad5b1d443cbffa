"""An adapter converts a contract's schema to its API's dialect once per schema object,
and sends the same bytes as before (``JsonHttpAdapter.converted``)."""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import respx

from providers.anthropic.adapter import to_tool_schema
from providers.base import ProviderRequest, RequestRefused, SchemaNotSupported
from providers.config import ProviderConfig
from providers.factory import build_provider
from providers.gemini.schema import to_gemini_schema
from providers.openai import rules, to_strict_schema

TLS = ssl.create_default_context()


def test_a_schema_object_is_converted_once_and_a_failure_is_not_kept(
    make_config: Callable[..., ProviderConfig],
) -> None:
    adapter = build_provider(make_config("openai"), httpx.AsyncClient(verify=TLS))
    calls: list[dict[str, Any]] = []

    def convert(schema: dict[str, Any]) -> dict[str, Any]:
        calls.append(schema)
        if schema.get("bad"):
            raise SchemaNotSupported((), "no")
        return {"converted": dict(schema)}

    schema = {"type": "object"}
    first = adapter.converted(schema, convert)  # type: ignore[attr-defined]
    assert adapter.converted(schema, convert) is first  # type: ignore[attr-defined]
    assert len(calls) == 1
    twin = {"type": "object"}  # equal, but another object: converted on its own
    assert adapter.converted(twin, convert) == first  # type: ignore[attr-defined]
    assert len(calls) == 2
    bad = {"bad": True}
    for _ in range(2):
        with pytest.raises(SchemaNotSupported):
            adapter.converted(bad, convert)  # type: ignore[attr-defined]
    assert len(calls) == 4


@pytest.mark.parametrize("protocol", ["openai", "anthropic", "gemini"])
async def test_repeated_calls_send_identical_bodies_with_the_converted_schema(
    protocol: str,
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    with respx.mock() as router:
        route = router.post(wire.endpoints[protocol]).respond(
            json=wire.body(protocol, json.dumps(wire.answer))
        )
        async with httpx.AsyncClient(verify=TLS) as client:
            provider = build_provider(make_config(protocol), client)
            request = make_request()
            for _ in range(3):
                assert (await provider.call(request)).output == wire.answer
    sent = [c.request.content for c in route.calls]
    assert len(sent) == 3 and sent[0] == sent[1] == sent[2]
    body = json.loads(sent[0])
    assert SCHEMA_AT[protocol](body) == CONVERT[protocol](request.output_schema)


CONVERT: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "openai": to_strict_schema,
    "anthropic": to_tool_schema,
    "gemini": to_gemini_schema,
}
SCHEMA_AT: dict[str, Callable[[dict[str, Any]], Any]] = {
    "openai": lambda body: body["response_format"]["json_schema"]["schema"],
    "anthropic": lambda body: body["tools"][0]["input_schema"],
    "gemini": lambda body: body["generationConfig"]["responseSchema"],
}


def _strict_body(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "hi"}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "out", "schema": schema, "strict": True},
        },
    }


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Each schema the OpenAI strict-mode rules walk, in order."""
    seen: list[Any] = []
    real = rules.strict_schema_problem

    def counting(schema: Any, *, fine_tuned: bool = False) -> str | None:
        seen.append(schema)
        return real(schema, fine_tuned=fine_tuned)

    monkeypatch.setattr(rules, "strict_schema_problem", counting)
    return seen


def test_a_kept_strict_verdict_is_one_walk_per_schema_object(walks: list[Any]) -> None:
    """With ``verdicts`` a schema object is walked once; a refusal is kept as well; any other
    caller (the simulator's, which parses a new body per request) walks every time."""
    good = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    bad = {"type": "object", "properties": {"a": {"type": "string"}}}  # no additionalProperties
    verdicts: rules.StrictVerdicts = {}
    for _ in range(3):
        rules.check_request(_strict_body(good), verdicts=verdicts)
        with pytest.raises(RequestRefused, match="additionalProperties"):
            rules.check_request(_strict_body(bad), verdicts=verdicts)
    assert walks == [good, bad]
    twin = dict(good)  # equal, but another object: walked on its own
    rules.check_request(_strict_body(twin), verdicts=verdicts)
    assert len(walks) == 3
    for _ in range(2):
        rules.check_request(_strict_body(good))
    assert len(walks) == 5


async def test_the_adapter_walks_its_converted_schema_once(
    walks: list[Any],
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    with respx.mock() as router:
        router.post(wire.endpoints["openai"]).respond(
            json=wire.body("openai", json.dumps(wire.answer))
        )
        async with httpx.AsyncClient(verify=TLS) as client:
            provider = build_provider(make_config("openai"), client)
            for _ in range(3):
                assert (await provider.call(make_request())).output == wire.answer
    assert len(walks) == 1
