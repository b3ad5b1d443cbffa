"""OpenAI Chat Completions with Structured Outputs (``response_format`` ``json_schema`` strict).

Request: ``POST {base_url}/chat/completions`` (``base_url`` ``https://api.openai.com/v1``),
``Authorization: Bearer``, the system prompt as the first message with role ``system``.
Answer: ``choices[0].message.content`` must be the JSON value itself; ``message.refusal``,
``finish_reason`` ``length`` or ``content_filter`` are refusals. The contract's schema is
sent in strict mode's dialect (``to_strict_schema``), and the whole body is checked against
the API's request rules before it leaves; ``temperature`` is left out for models that
refuse it (reasoning models).
"""

from __future__ import annotations

from typing import Any

from providers.base import BadOutput, ProviderRequest, ProviderResult, Refused
from providers.openai.rules import check_request
from providers.openai.schema import to_strict_schema
from providers.transport import (
    JsonHttpAdapter,
    bad_envelope,
    excerpt,
    first,
    parse_json_text,
    usage_from,
)

ADAPTER_VERSION = "openai/2"

#: ``finish_reason`` values that mean the answer is not the whole answer.
REFUSING_FINISH = {"length": "length", "content_filter": "content_filter"}


class OpenAIAdapter(JsonHttpAdapter):
    """Speak OpenAI Chat Completions."""

    adapter_version = ADAPTER_VERSION
    #: Name of the output-token limit field (newer models reject ``max_tokens``).
    max_tokens_field = "max_completion_tokens"

    def response_format(self, request: ProviderRequest) -> dict[str, Any]:
        """Return the ``response_format`` that asks for the contract's schema."""
        return {
            "type": "json_schema",
            "json_schema": {
                "name": request.schema_name,
                "schema": to_strict_schema(request.output_schema),
                "strict": True,
            },
        }

    def build(self, request: ProviderRequest) -> tuple[str, dict[str, str], dict[str, Any]]:
        """Return ``(url, headers, body)`` for ``request``."""
        headers = self._headers(request)
        if key := self.config.api_key():
            headers["authorization"] = f"Bearer {key}"
        body: dict[str, Any] = {
            "model": request.model or self.config.model,
            "messages": [
                {"role": "system", "content": request.system},
                {"role": "user", "content": request.user},
            ],
            self.max_tokens_field: request.max_output_tokens,
            "response_format": self.response_format(request),
        }
        if "temperature" not in self.omitted(request):
            body["temperature"] = request.temperature
        return f"{self.config.base_url.rstrip('/')}/chat/completions", headers, body

    def check(self, body: dict[str, Any]) -> None:
        """Raise ``RequestRefused`` for a body the Chat Completions API would refuse."""
        check_request(body)

    def hint(self, status: int, url: str) -> str | None:
        """Name the usual mistake behind a 404 or 401."""
        if status == 404 and "/v1/" not in url:
            return f"404 on {url}: does base_url end in /v1?"
        return super().hint(status, url)

    def parse(self, data: dict[str, Any], request_id: str | None, latency: float) -> ProviderResult:
        """Read ``choices[0]``; refusals and truncations raise ``Refused``."""
        choice = first(data.get("choices"), lambda c: isinstance(c, dict))
        if choice is None or not isinstance(choice.get("message"), dict):
            raise bad_envelope(self.name, "choices[0].message", request_id)
        message = choice["message"]
        finish = choice.get("finish_reason")
        if message.get("refusal"):
            raise Refused(
                f"{self.name} refused: {excerpt(str(message['refusal']))}",
                reason="refusal",
                request_id=request_id,
            )
        if finish in REFUSING_FINISH:
            raise Refused(
                f"{self.name} stopped early (finish_reason={finish})",
                reason=REFUSING_FINISH[finish],
                request_id=request_id,
            )
        content = message.get("content")
        if not isinstance(content, str):
            raise BadOutput(
                f"{self.name} answered without text content", reason="empty", request_id=request_id
            )
        return ProviderResult(
            output=parse_json_text(content, request_id=request_id),
            raw_text=content,
            request_id=request_id,
            usage=usage_from(data.get("usage"), "prompt_tokens", "completion_tokens"),
            finish_reason=finish,
            latency=latency,
            model=data.get("model"),
        )
