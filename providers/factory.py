"""Build the adapter for a configured provider."""

from __future__ import annotations

import httpx

from providers import anthropic, gemini, openai, openai_compatible
from providers.base import Provider
from providers.config import ProviderConfig
from providers.transport import JsonHttpAdapter

_ADAPTERS: dict[str, type[JsonHttpAdapter]] = {
    "openai": openai.OpenAIAdapter,
    "anthropic": anthropic.AnthropicAdapter,
    "gemini": gemini.GeminiAdapter,
    "openai-compatible": openai_compatible.OpenAICompatibleAdapter,
}
_VERSIONS = {
    "openai": openai.ADAPTER_VERSION,
    "anthropic": anthropic.ADAPTER_VERSION,
    "gemini": gemini.ADAPTER_VERSION,
    "openai-compatible": openai_compatible.ADAPTER_VERSION,
}


def build_provider(config: ProviderConfig, client: httpx.AsyncClient) -> Provider:
    """Return the adapter for ``config.protocol`` talking through ``client``."""
    try:
        adapter = _ADAPTERS[config.protocol]
    except KeyError:
        raise ValueError(f"unknown provider protocol {config.protocol!r}") from None
    return adapter(config, client)


def adapter_version(protocol: str) -> str:
    """Return the adapter version certificates are keyed on (``openai/1``)."""
    try:
        return _VERSIONS[protocol]
    except KeyError:
        raise ValueError(f"unknown provider protocol {protocol!r}") from None
