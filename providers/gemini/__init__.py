"""The Gemini generateContent plug-in: adapter, responseSchema dialect, rules, simulator wire."""

from __future__ import annotations

import json
import re
from typing import Any

from providers.base import ProviderRequest
from providers.gemini.adapter import ADAPTER_VERSION, SAFETY_FINISH, GeminiAdapter
from providers.gemini.rules import check_request
from providers.gemini.schema import response_schema_problem, to_gemini_schema
from providers.gemini.sim import GeminiWire
from providers.plugin import ProtocolPlugin


def placement_errors(body: dict[str, Any], req: ProviderRequest) -> list[str]:
    """Return where a generateContent body puts the system prompt wrongly."""
    errors: list[str] = []
    parts = (body.get("systemInstruction") or {}).get("parts") or []
    if "".join(p.get("text", "") for p in parts) != req.system:
        errors.append("'systemInstruction' does not hold the system prompt")
    if req.system in json.dumps(body.get("contents"), ensure_ascii=False):
        errors.append("the system prompt leaked into 'contents'")
    return errors


PLUGIN = ProtocolPlugin(
    name="gemini",
    genai_provider="gcp.gemini",
    adapter=GeminiAdapter,
    adapter_version=ADAPTER_VERSION,
    placement_errors=placement_errors,
    base_url_hint="it should be the host without /v1beta, e.g. "
    "https://generativelanguage.googleapis.com",
    wire=GeminiWire(),
    snapshot_suffix=re.compile(r"-\d{3}"),  # gemini-2.0-flash-001
    reported_model_prefix="models/",  # modelVersion sometimes carries the resource prefix
)

__all__ = [
    "ADAPTER_VERSION",
    "PLUGIN",
    "SAFETY_FINISH",
    "GeminiAdapter",
    "GeminiWire",
    "check_request",
    "placement_errors",
    "response_schema_problem",
    "to_gemini_schema",
]
