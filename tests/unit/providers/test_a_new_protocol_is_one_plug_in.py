"""A new wire protocol is its plug-in plus one registry entry, and nothing else.

A throwaway plug-in, registered only by putting it in ``providers.registry.PLUGINS`` (as
the one line there would), is accepted by the config's checks, built by the factory, and
gets its tokenizer, its snapshot rule, its base-URL hint and its simulator URL: every place
that differs by protocol asks the plug-in, none lists the protocols itself.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any, cast

import httpx
import pydantic
import pytest
import tiktoken.load

from certify.preflight import preflight
from contracts.loader import load_catalog
from providers import registry
from providers.config import ProviderConfig
from providers.factory import adapter_version, build_provider
from providers.model_identity import model_matches
from providers.openai import OpenAIAdapter
from providers.plugin import ProtocolPlugin
from providers.simulator.server import RunningSimulator
from providers.tokenizers import EstimateTokenizer, tokenizer_for

NAME = "smoke-signals"


class SmokeAdapter(OpenAIAdapter):
    """Chat Completions under another name: enough to be built and to send."""

    adapter_version = "smoke-signals/1"


SMOKE = ProtocolPlugin(
    name=NAME,
    adapter=SmokeAdapter,
    adapter_version=SmokeAdapter.adapter_version,
    placement_errors=lambda body, request: [],
    base_url_hint="it should end in /smoke, e.g. https://smoke.example/smoke",
    base_path="/smoke",
    reconcilable=True,
    snapshot_suffix=re.compile(r"@\d+"),
    reported_model_prefix="hills/",
    tokenizer="tiktoken",
)


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[ProtocolPlugin]:
    monkeypatch.setitem(registry.PLUGINS, NAME, SMOKE)
    yield SMOKE


def smoke_config(**fields: Any) -> ProviderConfig:
    base: dict[str, Any] = {
        "name": "p",
        "protocol": NAME,
        "base_url": "https://smoke.test/smoke",
        "model": "gpt-4o",
    }
    return ProviderConfig.model_validate({**base, **fields})


def test_unregistered_it_is_refused_with_the_known_protocols_listed() -> None:
    with pytest.raises(pydantic.ValidationError) as refused:
        smoke_config()
    message = str(refused.value)
    assert f"unknown protocol {NAME!r} (known: " in message
    assert all(name in message for name in registry.PLUGINS)


def test_registered_the_config_accepts_it_and_lists_it_among_the_known(
    registered: ProtocolPlugin,
) -> None:
    assert smoke_config().protocol == NAME
    with pytest.raises(pydantic.ValidationError, match=NAME):
        smoke_config(protocol="carrier-pigeon")


def test_reconcile_follows_the_plug_in(
    registered: ProtocolPlugin, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert smoke_config(reconcile=True).reconcile is True
    monkeypatch.setitem(registry.PLUGINS, NAME, _with(reconcilable=False))
    with pytest.raises(pydantic.ValidationError, match=f"the {NAME} protocol offers no such"):
        smoke_config(reconcile=True)


async def test_the_factory_builds_its_adapter(registered: ProtocolPlugin) -> None:
    async with httpx.AsyncClient() as client:
        adapter = build_provider(smoke_config(), client)
    assert type(adapter) is SmokeAdapter
    assert adapter_version(NAME) == "smoke-signals/1"


def test_it_gets_the_tokenizer_it_declares(
    registered: ProtocolPlugin, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_network(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("tiktoken tried to download an encoding")

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    assert tokenizer_for(smoke_config()).name == "tiktoken:o200k_base"
    monkeypatch.setitem(registry.PLUGINS, NAME, _with(tokenizer="estimate"))
    assert isinstance(tokenizer_for(smoke_config()), EstimateTokenizer)


def test_its_snapshot_rule_decides_which_reported_models_are_the_configured_one(
    registered: ProtocolPlugin,
) -> None:
    assert model_matches(NAME, "gpt-4o", "hills/gpt-4o@7").rule == "snapshot"
    assert model_matches(NAME, "gpt-4o", "gpt-4o@7").matches
    assert not model_matches(NAME, "gpt-4o", "gpt-4o-2024-08-06").matches  # OpenAI's rule


async def test_preflight_gives_its_base_url_hint_on_a_404(registered: ProtocolPlugin) -> None:
    contract = load_catalog()["ticket-triage@1"]
    transport = httpx.MockTransport(lambda request: httpx.Response(404, json={"error": "no"}))
    async with httpx.AsyncClient(transport=transport) as client:
        errors = await preflight([smoke_config()], contract, client)
    assert len(errors) == 1
    assert errors[0].endswith(f"looks wrong; {SMOKE.base_url_hint}")


def test_the_simulator_gives_it_a_base_url_on_its_path(registered: ProtocolPlugin) -> None:
    sim = RunningSimulator(app=cast(Any, None), host="127.0.0.1", port=8399)
    assert sim.provider_url("p", NAME) == "http://127.0.0.1:8399/p/p/smoke"


def _with(**changes: Any) -> ProtocolPlugin:
    return dataclasses.replace(SMOKE, **changes)
