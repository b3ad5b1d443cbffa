"""Build the adapter for a configured provider (each protocol is a plug-in)."""

from __future__ import annotations

import httpx

from providers.config import ProviderConfig
from providers.json_http_adapter import JsonHttpAdapter
from providers.registry import plugin_for


def build_provider(config: ProviderConfig, client: httpx.AsyncClient) -> JsonHttpAdapter:
    """Return the adapter for ``config.protocol`` talking through ``client``."""
    return plugin_for(config.protocol).adapter(config, client)


def adapter_version(protocol: str) -> str:
    """Return the adapter version certificates are keyed on (``openai/2``)."""
    return plugin_for(protocol).adapter_version
