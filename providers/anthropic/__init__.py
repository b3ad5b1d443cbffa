"""The Anthropic Messages plug-in: adapter, request rules, simulator wire."""

from __future__ import annotations

import json
import re
from typing import Any

from providers.anthropic.adapter import (
    ADAPTER_VERSION,
    ANTHROPIC_VERSION,
    REFUSING_STOP,
    AnthropicAdapter,
    to_tool_schema,
)
from providers.anthropic.rules import check_request
from providers.anthropic.sim import AnthropicWire
from providers.base import ProviderRequest
from providers.plugin import ProtocolPlugin


def placement_errors(body: dict[str, Any], req: ProviderRequest) -> list[str]:
    """Return where a Messages body puts the system prompt wrongly."""
    errors: list[str] = []
    system = body.get("system")
    text = (
        system
        if isinstance(system, str)
        else "".join(b.get("text", "") for b in system or [] if isinstance(b, dict))
    )
    if text != req.system:
        errors.append("the top-level 'system' field does not hold the system prompt")
    if any(m.get("role") == "system" for m in body.get("messages") or []):
        errors.append("the Messages API has no system role, yet a message uses it")
    if req.system in json.dumps(body.get("messages"), ensure_ascii=False):
        errors.append("the system prompt leaked into the messages")
    return errors


PLUGIN = ProtocolPlugin(
    name="anthropic",
    adapter=AnthropicAdapter,
    adapter_version=ADAPTER_VERSION,
    placement_errors=placement_errors,
    base_url_hint="it should be the host without /v1, e.g. https://api.anthropic.com",
    wire=AnthropicWire(),
    snapshot_suffix=re.compile(r"-\d{8}"),  # claude-sonnet-4-5-20250929
)

__all__ = [
    "ADAPTER_VERSION",
    "ANTHROPIC_VERSION",
    "PLUGIN",
    "REFUSING_STOP",
    "AnthropicAdapter",
    "AnthropicWire",
    "check_request",
    "placement_errors",
    "to_tool_schema",
]
