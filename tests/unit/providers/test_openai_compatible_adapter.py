from __future__ import annotations

import json
import ssl
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import respx

from providers.base import ProviderRequest
from providers.config import ProviderConfig
from providers.factory import adapter_version, build_provider

#: One TLS context for the module: building one per client costs ~80 ms.
TLS = ssl.create_default_context()


async def test_local_server_gets_max_tokens_and_a_json_schema_response_format(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    with respx.mock() as router:
        route = router.post(wire.endpoints["openai-compatible"]).respond(
            json=wire.body("openai", json.dumps(wire.answer))
        )
        async with httpx.AsyncClient(verify=TLS) as client:
            result = await build_provider(make_config("openai-compatible"), client).call(
                make_request()
            )
    body = json.loads(route.calls.last.request.content)
    assert body["max_tokens"] == 256
    assert "max_completion_tokens" not in body
    assert body["messages"][0]["role"] == "system"
    assert body["response_format"]["json_schema"]["schema"] == wire.schema
    assert result.output == wire.answer


async def test_local_server_configured_for_json_object_gets_json_object(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    config = make_config("openai-compatible", response_format="json_object")
    with respx.mock() as router:
        route = router.post(wire.endpoints["openai-compatible"]).respond(
            json=wire.body("openai", json.dumps(wire.answer))
        )
        async with httpx.AsyncClient(verify=TLS) as client:
            await build_provider(config, client).call(make_request())
    body = json.loads(route.calls.last.request.content)
    assert body["response_format"] == {"type": "json_object"}


async def test_local_server_without_a_key_gets_no_authorization_header(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    config = make_config("openai-compatible", api_key_env=None)
    with respx.mock() as router:
        route = router.post(wire.endpoints["openai-compatible"]).respond(
            json=wire.body("openai", json.dumps(wire.answer))
        )
        async with httpx.AsyncClient(verify=TLS) as client:
            await build_provider(config, client).call(make_request())
    assert "authorization" not in route.calls.last.request.headers


def test_factory_knows_every_protocol_and_rejects_others(
    make_config: Callable[..., ProviderConfig],
) -> None:
    assert adapter_version("openai-compatible") == "openai-compatible/2"
    with pytest.raises(ValueError, match="unknown provider protocol"):
        adapter_version("cohere")
