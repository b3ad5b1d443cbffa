"""Gemini generateContent with ``responseMimeType: application/json`` and ``responseSchema``.

Request: ``POST {base_url}/v1beta/models/{model}:generateContent`` (``base_url``
``https://generativelanguage.googleapis.com``), key in the ``x-goog-api-key`` header (never
in the URL, where it would end up in logs); the system prompt is ``systemInstruction``.
``responseSchema`` takes an OpenAPI subset of JSON Schema, so the contract's schema is
translated by ``to_gemini_schema``. Any ``finishReason`` but ``STOP`` is a refusal.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from providers.base import BadOutput, ProviderRequest, ProviderResult, Refused
from providers.transport import JsonHttpAdapter, bad_envelope, first, parse_json_text, usage_from

ADAPTER_VERSION = "gemini/1"

#: The schema keywords ``responseSchema`` accepts (an OpenAPI 3.0 subset).
SCHEMA_KEYS = frozenset(
    {
        "type", "format", "title", "description", "nullable", "enum", "items", "properties",
        "required", "minItems", "maxItems", "minimum", "maximum", "minLength", "maxLength",
        "pattern", "minProperties", "maxProperties", "anyOf", "propertyOrdering",
    }
)  # fmt: skip
#: ``finishReason`` values that are refusals, by the reason they are reported under.
SAFETY_FINISH = frozenset({"SAFETY", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"})
MAX_REF_DEPTH = 32  # nested $ref resolutions before giving up (recursive schemas)


def to_gemini_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Translate a JSON Schema into the subset ``responseSchema`` accepts."""
    defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    converted: dict[str, Any] = _convert(schema, defs, 0)
    return converted


def _convert(node: Any, defs: dict[str, Any], depth: int) -> Any:
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        if depth > MAX_REF_DEPTH:
            raise ValueError("schema $ref nesting too deep for responseSchema")
        name = str(node["$ref"]).rsplit("/", 1)[-1]
        return _convert({**defs.get(name, {}), **{k: v for k, v in node.items() if k != "$ref"}},
                        defs, depth + 1)  # fmt: skip
    out: dict[str, Any] = {}
    types = node.get("type")
    if isinstance(types, list):
        concrete = [t for t in types if t != "null"]
        if len(concrete) < len(types):
            out["nullable"] = True
        types = concrete[0] if len(concrete) == 1 else None
        if types is None and concrete:
            out["anyOf"] = [{"type": t} for t in concrete]
    if isinstance(types, str):
        out["type"] = types
    if "const" in node:
        out["enum"] = [node["const"]]
    enum = out.get("enum", node.get("enum"))
    if "type" not in out and isinstance(enum, list) and all(isinstance(v, str) for v in enum):
        out["type"] = "string"  # Gemini allows ``enum`` only on strings, and says so
    for key, value in node.items():
        if key not in SCHEMA_KEYS or key == "type":
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _convert(sub, defs, depth) for name, sub in value.items()}
        elif key == "items":
            out[key] = _convert(value, defs, depth)
        elif key == "anyOf" and isinstance(value, list):
            options = [o for o in value if not (isinstance(o, dict) and o.get("type") == "null")]
            if len(options) < len(value):
                out["nullable"] = True
            converted = [_convert(o, defs, depth) for o in options]
            if len(converted) == 1:
                out.update(converted[0])
            else:
                out[key] = converted
        else:
            out[key] = value
    return out


class GeminiAdapter(JsonHttpAdapter):
    """Speak Gemini generateContent."""

    adapter_version = ADAPTER_VERSION
    request_id_header = None

    def build(self, request: ProviderRequest) -> tuple[str, dict[str, str], dict[str, Any]]:
        """Return ``(url, headers, body)`` for ``request``."""
        headers = self._headers(request)
        if key := self.config.api_key():
            headers["x-goog-api-key"] = key
        model = urllib.parse.quote(request.model or self.config.model, safe="")
        body: dict[str, Any] = {
            "systemInstruction": {"parts": [{"text": request.system}]},
            "contents": [{"role": "user", "parts": [{"text": request.user}]}],
            "generationConfig": {
                "temperature": request.temperature,
                "maxOutputTokens": request.max_output_tokens,
                "responseMimeType": "application/json",
                "responseSchema": to_gemini_schema(request.output_schema),
            },
        }
        base = self.config.base_url.rstrip("/")
        return f"{base}/v1beta/models/{model}:generateContent", headers, body

    def body_request_id(self, data: dict[str, Any]) -> str | None:
        """Return ``responseId``."""
        value = data.get("responseId")
        return value if isinstance(value, str) else None

    def parse(self, data: dict[str, Any], request_id: str | None, latency: float) -> ProviderResult:
        """Read the first candidate; a blocked prompt or early finish raises ``Refused``."""
        candidate = first(data.get("candidates"), lambda c: isinstance(c, dict))
        if candidate is None:
            feedback = data.get("promptFeedback")
            block = feedback.get("blockReason") if isinstance(feedback, dict) else None
            if block:
                raise Refused(
                    f"{self.name} blocked the prompt (blockReason={block})",
                    reason="safety" if block in SAFETY_FINISH or block == "OTHER" else "blocked",
                    request_id=request_id,
                )
            raise bad_envelope(self.name, "candidates", request_id)
        finish = candidate.get("finishReason")
        if finish not in (None, "STOP"):
            if finish == "MAX_TOKENS":
                reason = "max_tokens"
            elif finish in SAFETY_FINISH:
                reason = "safety"
            else:
                reason = str(finish).lower()
            raise Refused(
                f"{self.name} stopped early (finishReason={finish})",
                reason=reason,
                request_id=request_id,
            )
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        text = "".join(
            p["text"]
            for p in (parts if isinstance(parts, list) else [])
            if isinstance(p, dict) and isinstance(p.get("text"), str) and not p.get("thought")
        )
        if not text:
            raise BadOutput(
                f"{self.name} answered without text", reason="empty", request_id=request_id
            )
        return ProviderResult(
            output=parse_json_text(text, request_id=request_id),
            raw_text=text,
            request_id=request_id,
            usage=usage_from(data.get("usageMetadata"), "promptTokenCount", "candidatesTokenCount"),
            finish_reason=finish,
            latency=latency,
            model=data.get("modelVersion"),
        )
