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

import json
from typing import Any

import httpx

from providers.base import BadOutput, DefiniteFailure, ProviderRequest, ProviderResult, Refused
from providers.endpoint import EndpointConfig
from providers.json_http_adapter import (
    JsonHttpAdapter,
    bad_envelope,
    excerpt,
    first,
    parse_json_text,
    usage_from,
)
from providers.lookup import LookupFailed, StoredAnswer
from providers.openai import capacity
from providers.openai.rules import StrictVerdicts, capabilities, check_request
from providers.openai.schema import to_strict_schema

ADAPTER_VERSION = "openai/2"

#: ``finish_reason`` values that mean the answer is not the whole answer.
REFUSING_FINISH = {"length": "length", "content_filter": "content_filter"}
#: The ``metadata`` key that carries the downstream key when ``reconcile`` is on.
METADATA_KEY = "onejob_key"
LOOKUP_MAX_PAGES = 10  # pages of the stored-completions list read for one key


class OpenAIAdapter(JsonHttpAdapter):
    """Speak OpenAI Chat Completions."""

    adapter_version = ADAPTER_VERSION
    default_capabilities = staticmethod(capabilities)
    capacity_of = staticmethod(capacity.capacity_of)
    limits_of = staticmethod(capacity.limits_of)
    #: Name of the output-token limit field (newer models reject ``max_tokens``).
    max_tokens_field = "max_completion_tokens"

    def __init__(self, config: EndpointConfig, client: httpx.AsyncClient) -> None:
        super().__init__(config, client)
        #: The strict-mode verdict of each converted schema (``check_request``).
        self._strict_verdicts: StrictVerdicts = {}

    def response_format(self, request: ProviderRequest) -> dict[str, Any]:
        """Return the ``response_format`` that asks for the contract's schema."""
        return {
            "type": "json_schema",
            "json_schema": {
                "name": request.schema_name,
                "schema": self.converted(request.output_schema, to_strict_schema),
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
        if self.config.reconcile and request.idempotency_key:
            # Stored completions can be listed by metadata later: the reconciler's question.
            body["store"] = True
            body["metadata"] = {METADATA_KEY: request.idempotency_key}
        return f"{self.config.base_url.rstrip('/')}/chat/completions", headers, body

    def check(self, body: dict[str, Any]) -> None:
        """Raise ``RequestRefused`` for a body the Chat Completions API would refuse."""
        check_request(body, verdicts=self._strict_verdicts)

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
            if calls := tool_call_names(message.get("tool_calls")):
                raise BadOutput(
                    f"{self.name} answered with tool_calls ({', '.join(calls)}) instead of the "
                    "JSON answer in message.content; the contract asks for structured output, "
                    "not a tool call",
                    reason="tool_calls",
                    request_id=request_id,
                    body_excerpt=excerpt(json.dumps(message.get("tool_calls"))),
                )
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

    async def lookup(self, downstream_key: str, *, timeout: float) -> StoredAnswer | None:
        """List stored completions by ``metadata[onejob_key]``; None when there is none.

        ``GET {base_url}/chat/completions?metadata[onejob_key]=<key>&order=asc``, following
        ``after`` (the last id of a page) while ``has_more``.
        """
        url = f"{self.config.base_url.rstrip('/')}/chat/completions"
        params: dict[str, str] = {f"metadata[{METADATA_KEY}]": downstream_key, "order": "asc"}
        found: list[dict[str, Any]] = []
        for _ in range(LOOKUP_MAX_PAGES):
            page = await self._get_list(url, params, timeout)
            items = [i for i in page.get("data") or [] if isinstance(i, dict)]
            found += [i for i in items if _carries(i, downstream_key)]
            if (
                page.get("has_more") is not True
                or not items
                or not isinstance(items[-1].get("id"), str)
            ):
                break
            params["after"] = items[-1]["id"]
        if not found:
            return None
        first = found[0]
        completion_id = first.get("id")
        if not isinstance(completion_id, str):
            raise LookupFailed(f"{self.name} listed a stored completion without an id")
        created = first.get("created")
        result: ProviderResult | None = None
        failure: DefiniteFailure | None = None
        try:
            result = self.parse(first, completion_id, 0.0)
        except DefiniteFailure as exc:
            failure = exc
        return StoredAnswer(
            completion_id=completion_id,
            created=float(created) if isinstance(created, int | float) else None,
            matches=len(found),
            result=result,
            failure=failure,
        )

    async def _get_list(self, url: str, params: dict[str, str], timeout: float) -> dict[str, Any]:
        headers = dict(self.config.extra_headers)
        if key := self.config.api_key():
            headers["authorization"] = f"Bearer {key}"
        where = f"{self.name} (stored completions)"
        try:
            response = await self.client.get(
                url, params=params, headers=headers, timeout=httpx.Timeout(timeout)
            )
        except httpx.HTTPError as exc:
            raise LookupFailed(f"could not ask {where}: {type(exc).__name__}") from exc
        if response.status_code != 200:
            raise LookupFailed(
                f"{where} answered HTTP {response.status_code}",
                reason=f"lookup_status_{response.status_code}",
                status_code=response.status_code,
            )
        try:
            data = json.loads(response.content)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise LookupFailed(f"{where} answered with a body that is not JSON") from exc
        if not isinstance(data, dict) or not isinstance(data.get("data"), list):
            raise LookupFailed(f"{where} answered without a list of completions")
        return data


def _carries(item: dict[str, Any], downstream_key: str) -> bool:
    """Say whether a listed completion carries the key (trust the filter when it has none)."""
    metadata = item.get("metadata")
    if not isinstance(metadata, dict) or METADATA_KEY not in metadata:
        return True
    return bool(metadata[METADATA_KEY] == downstream_key)


def tool_call_names(tool_calls: Any) -> list[str]:
    """Return the function names of an OpenAI ``tool_calls`` list (empty when there is none)."""
    if not isinstance(tool_calls, list):
        return []
    names = []
    for call in tool_calls:
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        names.append(name if isinstance(name, str) else "unnamed")
    return names
