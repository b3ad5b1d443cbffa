"""The adapters send through ``ProviderClient.post_read`` when the client is the shared
provider client without hooks, auth or redirects, and through ``post`` otherwise; either
way a failure is classified the same ("not sent" against "maybe sent")."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from providers.base import ConnectFailed, ConnectionLost, ProviderError, ProviderRequest
from providers.client import ProviderClient, provider_client
from providers.config import ProviderConfig
from providers.factory import build_provider

LIMITS = httpx.Limits(max_connections=4)


def _answering(wire: Any, protocol: str, seen: list[httpx.Request]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=wire.body(protocol, json.dumps(wire.answer)))

    return httpx.MockTransport(answer)


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Which of ``post_read`` and ``post`` each call went through."""
    seen: list[str] = []
    post_read, post = ProviderClient.post_read, ProviderClient.post

    async def spy_read(self: ProviderClient, *args: Any, **kwargs: Any) -> httpx.Response:
        seen.append("post_read")
        return await post_read(self, *args, **kwargs)

    async def spy_post(self: ProviderClient, *args: Any, **kwargs: Any) -> httpx.Response:
        seen.append("post")
        return await post(self, *args, **kwargs)

    monkeypatch.setattr(ProviderClient, "post_read", spy_read)
    monkeypatch.setattr(ProviderClient, "post", spy_post)
    return seen


@pytest.mark.parametrize("protocol", ["openai", "anthropic", "gemini"])
async def test_the_provider_client_is_sent_in_one_hop_unless_a_hook_is_added(
    protocol: str,
    hops: list[str],
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    seen: list[httpx.Request] = []
    async with provider_client(LIMITS, transport=_answering(wire, protocol, seen)) as client:
        provider = build_provider(make_config(protocol), client)
        assert (await provider.call(make_request())).output == wire.answer
        hooked: list[str] = []

        async def hook(request: httpx.Request) -> None:
            hooked.append(request.method)

        client.event_hooks = {"request": [hook]}
        assert (await provider.call(make_request())).output == wire.answer
    assert hops == ["post_read", "post"]
    assert hooked == ["POST"]
    first, second = seen
    assert first.content == second.content and first.url == second.url


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (httpx.ConnectError("refused"), ConnectFailed),
        (httpx.ConnectTimeout("slow connect"), ConnectFailed),
        (httpx.ReadError("reset"), ConnectionLost),
        (httpx.RemoteProtocolError("hung up"), ConnectionLost),
    ],
)
async def test_a_failure_in_one_hop_is_classified_as_through_post(
    raised: Exception,
    expected: type[ProviderError],
    hops: list[str],
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise raised

    async with provider_client(LIMITS, transport=httpx.MockTransport(fail)) as client:
        with pytest.raises(expected):
            await build_provider(make_config("openai"), client).call(make_request())
        caught = raised
        assert isinstance(caught, httpx.RequestError)
        assert caught.request.method == "POST"  # attached, as ``send`` does
    assert hops == ["post_read"]


async def test_credentials_in_the_url_are_sent_as_basic_auth() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text="ok")

    async with provider_client(LIMITS, transport=httpx.MockTransport(answer)) as client:
        assert isinstance(client, ProviderClient)
        for url in ("https://user:pw@llm.internal/v1/x", "https://llm.internal/v1/x"):
            r = await client.post_read(url, content=b"{}", headers={}, timeout=client.timeout)
            assert (r.status_code, r.text) == (200, "ok")
    assert seen[0].headers["authorization"] == "Basic " + base64.b64encode(b"user:pw").decode()
    assert "authorization" not in seen[1].headers
