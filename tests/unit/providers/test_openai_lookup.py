"""The OpenAI adapter's reconcile capability: what it sends, and how it asks afterwards."""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable
from typing import Any

import httpx
import pydantic
import pytest
import respx

from gateway.domain.ports import Reconcilable
from providers.base import ProviderRequest, Refused
from providers.config import ProviderConfig
from providers.lookup import LookupFailed
from providers.openai import OpenAIAdapter

TLS = ssl.create_default_context()
LIST = "https://api.openai.test/v1/chat/completions"


def stored(wire: Any, completion_id: str, key: str, finish: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = wire.body("openai", json.dumps(wire.answer), finish)
    return {**item, "id": completion_id, "metadata": {"onejob_key": key}}


def page(items: list[dict[str, Any]], has_more: bool = False) -> dict[str, Any]:
    return {
        "object": "list",
        "data": items,
        "first_id": items[0]["id"] if items else None,
        "last_id": items[-1]["id"] if items else None,
        "has_more": has_more,
    }


async def test_reconcile_sends_store_and_the_downstream_key_as_metadata(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    with respx.mock() as router:
        route = router.post(wire.endpoints["openai"]).respond(
            json=wire.body("openai", json.dumps(wire.answer))
        )
        async with httpx.AsyncClient(verify=TLS) as client:
            on = OpenAIAdapter(make_config("openai", reconcile=True), client)
            off = OpenAIAdapter(make_config("openai"), client)
            await on.call(make_request(idempotency_key="job_1/2"))
            await off.call(make_request(idempotency_key="job_1/3"))
    sent_on, sent_off = (json.loads(c.request.content) for c in route.calls)
    assert sent_on["store"] is True
    assert sent_on["metadata"] == {"onejob_key": "job_1/2"}
    assert "store" not in sent_off and "metadata" not in sent_off


@pytest.mark.parametrize("protocol", ["anthropic", "gemini", "openai-compatible"])
def test_reconcile_is_refused_on_protocols_that_cannot_be_asked(
    make_config: Callable[..., ProviderConfig], protocol: str
) -> None:
    with pytest.raises(pydantic.ValidationError, match="offers no such lookup"):
        make_config(protocol, reconcile=True)


async def test_lookup_filters_by_metadata_and_follows_pages_to_the_first_match(
    wire: Any, make_config: Callable[..., ProviderConfig]
) -> None:
    key = "job_1/1"
    with respx.mock() as router:
        route = router.get(LIST).mock(
            side_effect=[
                httpx.Response(200, json=page([stored(wire, "chatcmpl-1", key)], has_more=True)),
                httpx.Response(200, json=page([stored(wire, "chatcmpl-2", key)])),
            ]
        )
        async with httpx.AsyncClient(verify=TLS) as client:
            adapter = OpenAIAdapter(make_config("openai", reconcile=True), client)
            assert isinstance(adapter, Reconcilable)
            found = await adapter.lookup(key, timeout=2.0)
    first, second = (c.request for c in route.calls)
    assert first.url.params["metadata[onejob_key]"] == key
    assert first.url.params["order"] == "asc" and "after" not in first.url.params
    assert second.url.params["after"] == "chatcmpl-1"
    assert first.headers["authorization"].startswith("Bearer sk-test")
    assert found is not None
    assert found.completion_id == "chatcmpl-1" and found.matches == 2
    assert found.result is not None and found.result.output == wire.answer
    assert found.failure is None


async def test_lookup_of_a_key_nobody_stored_is_none(
    wire: Any, make_config: Callable[..., ProviderConfig]
) -> None:
    other = stored(wire, "chatcmpl-9", "job_2/1")  # a server that ignored the filter
    with respx.mock() as router:
        router.get(LIST).respond(json=page([other]))
        async with httpx.AsyncClient(verify=TLS) as client:
            adapter = OpenAIAdapter(make_config("openai", reconcile=True), client)
            assert await adapter.lookup("job_1/1", timeout=2.0) is None


async def test_a_stored_answer_cut_short_is_found_with_its_definite_failure(
    wire: Any, make_config: Callable[..., ProviderConfig]
) -> None:
    with respx.mock() as router:
        router.get(LIST).respond(json=page([stored(wire, "chatcmpl-1", "k/1", "length")]))
        async with httpx.AsyncClient(verify=TLS) as client:
            adapter = OpenAIAdapter(make_config("openai", reconcile=True), client)
            found = await adapter.lookup("k/1", timeout=2.0)
    assert found is not None and found.result is None
    assert isinstance(found.failure, Refused)


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(500, json={"error": {"message": "boom"}}),
        httpx.Response(200, content=b"not json"),
        httpx.Response(200, json={"object": "list"}),
        httpx.ConnectError("refused"),
    ],
)
async def test_a_lookup_that_gets_no_list_raises_lookup_failed(
    make_config: Callable[..., ProviderConfig], answer: Any
) -> None:
    with respx.mock() as router:
        router.get(LIST).mock(side_effect=[answer])
        async with httpx.AsyncClient(verify=TLS) as client:
            adapter = OpenAIAdapter(make_config("openai", reconcile=True), client)
            with pytest.raises(LookupFailed):
                await adapter.lookup("k/1", timeout=2.0)
