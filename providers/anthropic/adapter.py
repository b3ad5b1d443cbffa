"""Anthropic Messages, with the JSON answer taken from a forced tool call.

Request: ``POST {base_url}/v1/messages`` (``base_url`` ``https://api.anthropic.com``),
headers ``x-api-key`` and ``anthropic-version``; the system prompt is the top-level
``system`` field (the Messages API has no system role). One tool named after the schema,
with the output schema as its ``input_schema``, is forced through
``tool_choice: {"type": "tool", "name": ...}``; its ``input`` is the answer.
``stop_reason`` ``max_tokens`` and ``refusal`` are refusals. The body is checked against
the API's request rules before it leaves; ``temperature`` is left out for models that
refuse it (Claude Opus 4.7 and later, the 5 generation, Fable and Mythos).
"""

from __future__ import annotations

import json
from typing import Any

from providers.anthropic import capacity
from providers.anthropic.rules import capabilities, check_request
from providers.base import BadOutput, ProviderRequest, ProviderResult, Refused, SchemaNotSupported
from providers.json_http_adapter import JsonHttpAdapter, bad_envelope, parse_json_text, usage_from

ADAPTER_VERSION = "anthropic/2"
ANTHROPIC_VERSION = "2023-06-01"  # the ``anthropic-version`` header value

#: ``stop_reason`` values that mean the answer is not the whole answer.
REFUSING_STOP = {"max_tokens": "max_tokens", "refusal": "refusal"}


def to_tool_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Return ``schema`` as a tool's ``input_schema`` (JSON Schema as is; the root an object)."""
    if schema.get("type") != "object":
        raise SchemaNotSupported((), "a tool's input_schema must have type 'object' at the root")
    return schema


class AnthropicAdapter(JsonHttpAdapter):
    """Speak Anthropic Messages."""

    adapter_version = ADAPTER_VERSION
    default_capabilities = staticmethod(capabilities)
    capacity_of = staticmethod(capacity.capacity_of)
    limits_of = staticmethod(capacity.limits_of)
    request_id_header = "request-id"

    def build(self, request: ProviderRequest) -> tuple[str, dict[str, str], dict[str, Any]]:
        """Return ``(url, headers, body)`` for ``request``."""
        headers = self._headers(request)
        headers["anthropic-version"] = ANTHROPIC_VERSION
        if key := self.config.api_key():
            headers["x-api-key"] = key
        body: dict[str, Any] = {
            "model": request.model or self.config.model,
            "max_tokens": request.max_output_tokens,
            "system": request.system,
            "messages": [{"role": "user", "content": request.user}],
            "tools": [
                {
                    "name": request.schema_name,
                    "description": "Record the answer in exactly this structure.",
                    "input_schema": self.converted(request.output_schema, to_tool_schema),
                }
            ],
            "tool_choice": {"type": "tool", "name": request.schema_name},
        }
        if "temperature" not in self.omitted(request):
            body["temperature"] = request.temperature
        return f"{self.config.base_url.rstrip('/')}/v1/messages", headers, body

    def check(self, body: dict[str, Any]) -> None:
        """Raise ``RequestRefused`` for a body the Messages API would refuse."""
        check_request(body)

    def hint(self, status: int, url: str) -> str | None:
        """Name the usual mistake behind a 404 (``/v1`` twice) or 401."""
        if status == 404 and "/v1/v1/" in url:
            return f"404 on {url}: base_url must not end in /v1 (the adapter adds /v1/messages)"
        if status == 404:
            return f"404 on {url}: base_url should be the API root, e.g. https://api.anthropic.com"
        return super().hint(status, url)

    def parse(self, data: dict[str, Any], request_id: str | None, latency: float) -> ProviderResult:
        """Take the forced tool's ``input``; fall back to strict parsing of text blocks."""
        content = data.get("content")
        if not isinstance(content, list):
            raise bad_envelope(self.name, "content", request_id)
        stop = data.get("stop_reason")
        if stop in REFUSING_STOP:
            raise Refused(
                f"{self.name} stopped early (stop_reason={stop})",
                reason=REFUSING_STOP[stop],
                request_id=request_id,
            )
        tool = next(
            (b for b in content if isinstance(b, dict) and b.get("type") == "tool_use"), None
        )
        if tool is not None:
            output = tool.get("input")
            raw_text = json.dumps(output, ensure_ascii=False)
        else:
            raw_text = "".join(
                b.get("text", "")
                for b in content
                if isinstance(b, dict) and b.get("type") == "text"
            )
            if not raw_text:
                raise BadOutput(
                    f"{self.name} answered with neither the tool call nor text",
                    reason="empty",
                    request_id=request_id,
                )
            output = parse_json_text(raw_text, request_id=request_id)
        return ProviderResult(
            output=output,
            raw_text=raw_text,
            request_id=request_id,
            usage=usage_from(data.get("usage"), "input_tokens", "output_tokens"),
            finish_reason=stop,
            latency=latency,
            model=data.get("model"),
        )
