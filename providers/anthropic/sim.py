"""The simulated Messages wire: ``POST /v1/messages``, JSON or SSE events."""

from __future__ import annotations

import json
from typing import Any

from providers.anthropic.capacity import rfc3339_text
from providers.anthropic.rules import check_request
from providers.base import RequestRefused
from providers.sim_wire import (
    LimitWindow,
    Reply,
    RouteMatch,
    WireRequest,
    WireResponse,
    cut,
    json_response,
    pieces,
    retry_after_header,
    sse_response,
    text_of,
    whole_seconds,
)

PATH = "/v1/messages"
#: ``(error type, message)`` by status (https://docs.anthropic.com/en/api/errors).
SCRIPTED = {
    400: ("invalid_request_error", "simulated status 400"),
    401: ("authentication_error", "invalid x-api-key"),
    403: (
        "permission_error",
        "Your API key does not have permission to use the specified resource.",
    ),
    404: ("not_found_error", "The requested resource could not be found."),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit."),
    500: ("api_error", "Internal server error"),
    529: ("overloaded_error", "Overloaded"),
}  # fmt: skip
#: What a bucket-refused request is told (Anthropic's wording, with the bucket's limit).
RATE_LIMITED = (
    "This request would exceed the rate limit for your organization of {limit} requests per "
    "minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see "
    "the response headers for current usage. Please reduce the prompt length or the maximum "
    "tokens requested, or try again later."
)
#: The 400 a spent credit balance gets (``invalid_request_error``, as the API answers it).
CREDIT_TOO_LOW = (
    "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing "
    "to upgrade or purchase credits."
)


class AnthropicWire:
    """Anthropic Messages as the simulator speaks it."""

    protocol = "anthropic"

    def match(self, path: str) -> RouteMatch | None:
        """Answer ``/v1/messages``."""
        return RouteMatch() if path == PATH else None

    def claims(self, path: str) -> bool:
        """Claim paths that look like the Messages API (``/v1/v1/messages``, ``/messages``)."""
        return path.rstrip("/").endswith("messages") or "/messages/" in path

    def parse(self, body: dict[str, Any], route: RouteMatch, query: str) -> WireRequest:
        """Read a Messages request after the API's own checks."""
        check_request(body)
        users = [m for m in body["messages"] if m["role"] == "user"]
        if not users:
            raise RequestRefused("the simulator needs a user message", type="invalid_request_error")
        tool_name = None
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and choice.get("type") == "tool":
            tool_name = choice["name"]
        system = body.get("system")
        return WireRequest(
            protocol=self.protocol,
            model=body["model"],
            system=text_of(system) if system is not None else None,
            user=text_of(users[-1].get("content")),
            max_tokens=body["max_tokens"],
            tool_name=tool_name,
            stream=body.get("stream") is True,
        )

    def success(self, req: WireRequest, reply: Reply, request_id: str, now: float) -> WireResponse:
        """Write a ``message`` or its event stream."""
        answer = cut(req, reply)
        tool = req.tool_name is not None and answer.structured and isinstance(reply.value, dict)
        stop = "max_tokens" if answer.truncated else "tool_use" if tool else "end_turn"
        extra = [("request-id", f"req_{request_id}")]
        message: dict[str, Any] = {
            "id": f"msg_{request_id}",
            "type": "message",
            "role": "assistant",
            "model": req.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": answer.input_tokens, "output_tokens": answer.output_tokens},
        }
        block: dict[str, Any] = (
            {
                "type": "tool_use",
                "id": f"toolu_{request_id}",
                "name": req.tool_name,
                "input": reply.value,
            }
            if tool
            else {"type": "text", "text": answer.text}
        )
        if not req.stream:
            return json_response(200, {**message, "content": [block], "stop_reason": stop}, extra)
        start = {**message, "usage": {"input_tokens": answer.input_tokens, "output_tokens": 1}}
        events = [_event("message_start", {"type": "message_start", "message": start})]
        empty = {**block, "input": {}} if tool else {"type": "text", "text": ""}
        events.append(
            _event(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": empty},
            )
        )
        events.append(_event("ping", {"type": "ping"}))
        for piece in pieces(answer.text):
            delta = (
                {"type": "input_json_delta", "partial_json": piece}
                if tool
                else {"type": "text_delta", "text": piece}
            )
            events.append(
                _event(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": delta},
                )
            )
        events.append(_event("content_block_stop", {"type": "content_block_stop", "index": 0}))
        events.append(
            _event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": answer.output_tokens},
                },
            )
        )
        events.append(_event("message_stop", {"type": "message_stop"}))
        return sse_response(events, extra)

    def error(
        self, refused: RequestRefused, request_id: str, retry_after: float | None = None
    ) -> WireResponse:
        """Write ``{"type": "error", "error": {type, message}, "request_id"}``."""
        return self._answer(refused, request_id, retry_after_header(retry_after))

    def _answer(
        self, refused: RequestRefused, request_id: str, headers: list[tuple[str, str]]
    ) -> WireResponse:
        kind = refused.type or SCRIPTED.get(refused.status, ("api_error", ""))[0]
        payload = {
            "type": "error",
            "error": {"type": kind, "message": refused.message},
            "request_id": f"req_{request_id}",
        }
        extra = [*headers, ("request-id", f"req_{request_id}")]
        return json_response(refused.status, payload, extra)

    def scripted(self, status: int) -> RequestRefused:
        """Return the error a script asks for by status."""
        kind, message = SCRIPTED.get(status, ("api_error", f"simulated status {status}"))
        return RequestRefused(message, status=status, type=kind)

    def limit_headers(self, window: LimitWindow) -> list[tuple[str, str]]:
        """``anthropic-ratelimit-requests-limit``, ``-remaining`` and ``-reset`` (RFC 3339)."""
        return [
            ("anthropic-ratelimit-requests-limit", str(window.requests_per_minute)),
            ("anthropic-ratelimit-requests-remaining", str(window.remaining)),
            ("anthropic-ratelimit-requests-reset", rfc3339_text(window.now + window.reset_s)),
        ]

    def rate_limited(
        self, request_id: str, retry_after: float | None, window: LimitWindow | None = None
    ) -> WireResponse:
        """429 ``rate_limit_error`` with ``retry-after`` in whole seconds."""
        if window is None:
            return self.error(self.scripted(429), request_id, retry_after)
        wait = whole_seconds(retry_after or 0.0)
        refused = RequestRefused(
            RATE_LIMITED.format(limit=window.requests_per_minute),
            status=429,
            type="rate_limit_error",
        )
        return self._answer(
            refused, request_id, [("retry-after", str(wait)), *self.limit_headers(window)]
        )

    def overloaded(
        self, request_id: str, status: int | None = None, retry_after: float | None = None
    ) -> WireResponse:
        """529 ``overloaded_error`` ``Overloaded`` (any status asked: the same error)."""
        refused = RequestRefused("Overloaded", status=status or 529, type="overloaded_error")
        return self.error(refused, request_id, retry_after)

    def quota_exhausted(self, request_id: str) -> WireResponse:
        """400 ``invalid_request_error``: "Your credit balance is too low ..."."""
        refused = RequestRefused(CREDIT_TOO_LOW, status=400, type="invalid_request_error")
        return self.error(refused, request_id)

    def not_found(self, method: str, path: str) -> RequestRefused:
        """``not_found_error`` ``Not Found``, as api.anthropic.com answers."""
        return RequestRefused("Not Found", status=404, type="not_found_error")

    def method_not_allowed(self, method: str, path: str) -> RequestRefused:
        """``Method Not Allowed`` in the error envelope."""
        return RequestRefused("Method Not Allowed", status=405, type="invalid_request_error")


def _event(name: str, data: dict[str, Any]) -> bytes:
    payload = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return f"event: {name}\ndata: {payload}\n\n".encode()
