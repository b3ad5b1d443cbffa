"""A failed call's message keeps what an operator needs: the system's reason for a failed
connect, the key's variable on an auth refusal, the deadline as configured."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import respx

from gateway.bootstrap import warn_of_missing_api_keys
from gateway.settings import Settings
from providers.base import ConnectFailed, ProviderError, ProviderRequest, Rejected, TimedOut
from providers.client import provider_client
from providers.config import ProviderConfig
from providers.factory import build_provider

KEY_ENV = "ONEJOB_TEST_PROVIDER_KEY"  # the providers' conftest sets it


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def failure(config: ProviderConfig, request: ProviderRequest, *, own_pool: bool) -> Any:
    limits = httpx.Limits(max_connections=2)
    async with provider_client(limits, None, own_pool=own_pool) as client:
        with pytest.raises(ProviderError) as caught:
            await build_provider(config, client).call(request)
    return caught.value


@pytest.mark.parametrize("own_pool", [True, False], ids=["onejob-pool", "httpx-transport"])
async def test_a_name_that_does_not_resolve_keeps_the_resolvers_reason(
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    own_pool: bool,
) -> None:
    config = make_config("openai", base_url="http://onejob-no-such-host.invalid/v1")
    error = await failure(config, make_request(), own_pool=own_pool)
    assert isinstance(error, ConnectFailed)
    assert str(error).startswith("could not connect to test-openai (openai): ConnectError: ")
    assert "Name or service not known" in str(error) or "not known" in str(error), str(error)


@pytest.mark.parametrize("own_pool", [True, False], ids=["onejob-pool", "httpx-transport"])
async def test_a_refused_port_says_so(
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    own_pool: bool,
) -> None:
    config = make_config("anthropic", base_url=f"http://127.0.0.1:{closed_port()}")
    error = await failure(config, make_request(), own_pool=own_pool)
    assert isinstance(error, ConnectFailed)
    assert "ConnectError: " in str(error), str(error)
    assert "refused" in str(error).lower() or "failed" in str(error).lower(), str(error)


@pytest.mark.parametrize("protocol", ["openai", "anthropic", "gemini"])
async def test_a_refusal_with_the_key_variable_unset_names_the_variable(
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    monkeypatch: pytest.MonkeyPatch,
    protocol: str,
) -> None:
    monkeypatch.delenv(KEY_ENV)
    config = make_config(protocol)
    with respx.mock(assert_all_called=False) as router:
        router.post(url__startswith=config.base_url).mock(
            return_value=httpx.Response(400, json={"error": {"message": "API key missing"}})
        )
        async with httpx.AsyncClient() as client:
            with pytest.raises(Rejected) as caught:
                await build_provider(config, client).call(make_request())
    assert f"(hint: {KEY_ENV} is not set in the gateway's environment)" in str(caught.value)


@pytest.mark.parametrize("status", [401, 403])
async def test_an_auth_refusal_with_the_key_set_asks_whether_it_is_valid(
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    status: int,
) -> None:
    config = make_config("openai")
    with respx.mock(assert_all_called=False) as router:
        router.post(url__startswith=config.base_url).mock(
            return_value=httpx.Response(status, json={"error": {"message": "bad key"}})
        )
        async with httpx.AsyncClient() as client:
            with pytest.raises(Rejected) as caught:
                await build_provider(config, client).call(make_request())
    assert f"(hint: is {KEY_ENV} set to a valid key?)" in str(caught.value)


async def test_a_deadline_is_named_as_configured_not_as_the_float_left(
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    config = make_config("openai", timeout=0.3)

    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return httpx.Response(200)

    with respx.mock(assert_all_called=False) as router:
        router.post(url__startswith=config.base_url).mock(side_effect=slow)
        async with httpx.AsyncClient() as client:
            with pytest.raises(TimedOut) as caught:
                await build_provider(config, client).call(make_request(timeout=0.29973))
    assert str(caught.value) == "test-openai (openai) did not finish within the 0.3s deadline"


def test_serve_warns_once_per_provider_whose_key_variable_is_unset(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = Settings.model_validate(
        {
            "providers": {
                "openai-main": {
                    "protocol": "openai",
                    "base_url": "https://api.openai.com/v1",
                    "model": "gpt-4o-mini",
                    "api_key_env": "ONEJOB_TEST_UNSET_OPENAI_KEY",
                },
                "claude": {
                    "protocol": "anthropic",
                    "base_url": "https://api.anthropic.com",
                    "model": "claude-x",
                    "api_key_env": "ONEJOB_TEST_SET_KEY",
                },
            }
        }
    )
    with caplog.at_level(logging.WARNING, logger="onejob.runtime"):
        missing = warn_of_missing_api_keys(settings, env={"ONEJOB_TEST_SET_KEY": "k"})
    assert missing == 1
    [record] = caplog.records
    assert record.getMessage() == (
        "provider openai-main has no API key: ONEJOB_TEST_UNSET_OPENAI_KEY is not set; "
        "its calls will be refused"
    )
