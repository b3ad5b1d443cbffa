"""Gemini generateContent with ``responseMimeType: application/json`` and ``responseSchema``.

Request: ``POST {base_url}/v1beta/models/{model}:generateContent`` (``base_url``
``https://generativelanguage.googleapis.com``), key in the ``x-goog-api-key`` header (never
in the URL, where it would end up in logs); the system prompt is ``systemInstruction``.
``responseSchema`` takes an OpenAPI subset of JSON Schema, so the contract's schema is
translated by ``to_gemini_schema``, and the body is checked against the API's request rules
before it leaves. Any ``finishReason`` but ``STOP`` is a refusal.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from providers.base import BadOutput, ProviderRequest, ProviderResult, Refused
from providers.gemini import capacity
from providers.gemini.rules import capabilities, check_request
from providers.gemini.schema import to_gemini_schema
from providers.json_http_adapter import (
    JsonHttpAdapter,
    bad_envelope,
    first,
    parse_json_text,
    usage_from,
)

ADAPTER_VERSION = "gemini/2"

#: ``finishReason`` values that are refusals, by the reason they are reported under.
SAFETY_FINISH = frozenset({"SAFETY", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"})


class GeminiAdapter(JsonHttpAdapter):
    """Speak Gemini generateContent."""

    adapter_version = ADAPTER_VERSION
    default_capabilities = staticmethod(capabilities)
    capacity_of = staticmethod(capacity.capacity_of)
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
                "maxOutputTokens": request.max_output_tokens,
                "responseMimeType": "application/json",
                "responseSchema": self.converted(request.output_schema, to_gemini_schema),
            },
        }
        if "temperature" not in self.omitted(request):
            body["generationConfig"]["temperature"] = request.temperature
        base = self.config.base_url.rstrip("/")
        return f"{base}/v1beta/models/{model}:generateContent", headers, body

    def check(self, body: dict[str, Any]) -> None:
        """Raise ``RequestRefused`` for a body generateContent would refuse."""
        check_request(body)

    def hint(self, status: int, url: str) -> str | None:
        """Name the usual mistake behind a 404 (a version in base_url, an unknown model)."""
        if status == 404 and ("/v1beta/v1beta/" in url or "/v1/v1beta/" in url):
            return f"404 on {url}: base_url must not include the API version (/v1beta)"
        if status == 404:
            return f"404 on {url}: is the model name right, and base_url the API root?"
        return super().hint(status, url)

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
