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
from providers.base import ProviderRequest
from providers.config import ProviderConfig
from providers.factory import build_provider
from providers.gemini.schema import to_gemini_schema
from providers.openai import to_strict_schema
from providers.plugin import SchemaNotSupported

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
