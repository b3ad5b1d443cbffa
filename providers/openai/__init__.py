"""The OpenAI Chat Completions plug-in: adapter, strict-schema dialect, rules, simulator wire."""

from __future__ import annotations

import re
from typing import Any

from providers.base import ProviderRequest
from providers.openai.adapter import ADAPTER_VERSION, REFUSING_FINISH, OpenAIAdapter
from providers.openai.rules import check_request
from providers.openai.schema import strict_schema_problem, to_strict_schema
from providers.openai.sim import OpenAIWire
from providers.plugin import ProtocolPlugin


def placement_errors(body: dict[str, Any], req: ProviderRequest) -> list[str]:
    """Return where a Chat Completions body puts the system prompt wrongly."""
    errors: list[str] = []
    msgs = body.get("messages") or []
    first = msgs[0] if msgs else {}
    if first.get("role") != "system" or first.get("content") != req.system:
        errors.append("the first message is not the system prompt")
    if sum(1 for m in msgs if m.get("role") == "system") != 1:
        errors.append("there must be exactly one system message")
    if not msgs or msgs[-1].get("role") != "user" or msgs[-1].get("content") != req.user:
        errors.append("the last message is not the user message")
    return errors


PLUGIN = ProtocolPlugin(
    name="openai",
    adapter=OpenAIAdapter,
    adapter_version=ADAPTER_VERSION,
    placement_errors=placement_errors,
    base_url_hint="it should end in /v1, e.g. https://api.openai.com/v1",
    base_path="/v1",
    wire=OpenAIWire(),
    reconcilable=True,  # stored chat completions, listed by metadata (``lookup``)
    snapshot_suffix=re.compile(r"-\d{4}-\d{2}-\d{2}"),  # gpt-4o-2024-08-06
    tokenizer="tiktoken",
)

__all__ = [
    "ADAPTER_VERSION",
    "PLUGIN",
    "REFUSING_FINISH",
    "OpenAIAdapter",
    "OpenAIWire",
    "check_request",
    "placement_errors",
    "strict_schema_problem",
    "to_strict_schema",
]
