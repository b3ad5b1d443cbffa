"""The simulated Chat Completions wire: ``POST /v1/chat/completions``, JSON or SSE."""

from __future__ import annotations

import json
import math
from typing import Any

from providers.base import RequestRefused
from providers.openai.capacity import go_duration_text
from providers.openai.rules import check_request
from providers.sim_wire import (
    LimitWindow,
    Reply,
    RouteMatch,
    WireRequest,
    WireResponse,
    cut,
    int_or_none,
    json_response,
    pieces,
    retry_after_header,
    sse_response,
    text_of,
    whole_seconds,
)

PATH = "/v1/chat/completions"
#: ``(type, code, message)`` of the errors a script asks for by status.
SCRIPTED = {
    400: ("invalid_request_error", None, "simulated status 400"),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided: sk-sim***."),
    403: ("invalid_request_error", "unsupported_country_region_territory",
          "Country, region, or territory not supported"),
    404: ("invalid_request_error", "model_not_found",
          "The model does not exist or you do not have access to it."),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests (simulated)."),
    500: ("server_error", None,
          "The server had an error while processing your request. Sorry about that!"),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
}  # fmt: skip
#: What a bucket-refused request is told (OpenAI's wording, with the bucket's numbers).
RATE_LIMITED = (
    "Rate limit reached in organization org-onejob-sim on requests per min (RPM): Limit {limit}, "
    "Used {limit}, Requested 1. Please try again in {wait}. Visit "
    "https://platform.openai.com/account/rate-limits to learn more."
)
QUOTA = (
    "You exceeded your current quota, please check your plan and billing details. For more "
    "information on this error, read the docs: "
    "https://platform.openai.com/docs/guides/error-codes/api-errors."
)


class OpenAIWire:
    """Chat Completions as the simulator speaks it (also what openai-compatible servers get)."""

    protocol = "openai"

    def match(self, path: str) -> RouteMatch | None:
        """Answer ``/v1/chat/completions``."""
        return RouteMatch() if path == PATH else None

    def claims(self, path: str) -> bool:
        """Claim paths that look like Chat Completions or other ``/v1`` OpenAI paths."""
        return "completions" in path or path.startswith(("/v1/responses", "/v1/models"))

    def parse(self, body: dict[str, Any], route: RouteMatch, query: str) -> WireRequest:
        """Read a Chat Completions request after the API's own checks."""
        check_request(body)
        messages = body["messages"]
        system = [
            text_of(m.get("content")) for m in messages if m["role"] in ("system", "developer")
        ]
        users = [m for m in messages if m["role"] == "user"]
        if not users:  # the API would answer; the simulator needs a contract block to answer
            raise RequestRefused(
                "the simulator needs a user message", param="messages", type="invalid_request_error"
            )
        options = body.get("stream_options") or {}
        limit = int_or_none(body.get("max_completion_tokens")) or int_or_none(
            body.get("max_tokens")
        )
        return WireRequest(
            protocol=self.protocol,
            model=body["model"],
            system="\n".join(system) if system else None,
            user=text_of(users[-1].get("content")),
            max_tokens=limit,
            stream=body.get("stream") is True,
            include_usage=isinstance(options, dict) and options.get("include_usage") is True,
            store=body.get("store") is True,
            metadata=body.get("metadata"),
        )

    def success(self, req: WireRequest, reply: Reply, request_id: str, now: float) -> WireResponse:
        """Write a ``chat.completion`` or its ``chat.completion.chunk`` stream."""
        answer = cut(req, reply)
        finish = "length" if answer.truncated else "stop"
        usage = {
            "prompt_tokens": answer.input_tokens,
            "completion_tokens": answer.output_tokens,
            "total_tokens": answer.input_tokens + answer.output_tokens,
        }
        head = {"id": f"chatcmpl-{request_id}", "created": int(now), "model": req.model}
        extra = [("x-request-id", f"req_{request_id}")]
        if not req.stream:
            payload = {
                **head,
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": answer.text, "refusal": None},
                        "logprobs": None,
                        "finish_reason": finish,
                    }
                ],
                "usage": usage,
                "system_fingerprint": "fp_onejob_sim",
            }
            if not reply.usage:  # several OpenAI-compatible servers send no usage object
                del payload["usage"]
            return json_response(200, payload, extra)
        chunk_head = {
            **head,
            "object": "chat.completion.chunk",
            "system_fingerprint": "fp_onejob_sim",
        }

        def chunk(delta: dict[str, Any], finish_reason: str | None) -> bytes:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            data: dict[str, Any] = {**chunk_head, "choices": [choice]}
            if req.include_usage:
                data["usage"] = None
            return _event(data)

        events = [chunk({"role": "assistant", "content": "", "refusal": None}, None)]
        events += [chunk({"content": piece}, None) for piece in pieces(answer.text)]
        events.append(chunk({}, finish))
        if req.include_usage and reply.usage:
            events.append(_event({**chunk_head, "choices": [], "usage": usage}))
        events.append(b"data: [DONE]\n\n")
        return sse_response(events, extra)

    def error(
        self, refused: RequestRefused, request_id: str, retry_after: float | None = None
    ) -> WireResponse:
        """Write ``{"error": {message, type, param, code}}`` with ``x-request-id``."""
        return self._answer(refused, request_id, retry_after_header(retry_after))

    def _answer(
        self, refused: RequestRefused, request_id: str, headers: list[tuple[str, str]]
    ) -> WireResponse:
        kind, code, _ = SCRIPTED.get(refused.status, ("server_error", None, ""))
        payload = {
            "error": {
                "message": refused.message,
                "type": refused.type or kind,
                "param": refused.param,
                "code": refused.code if refused.type else code,
            }
        }
        extra = [*headers, ("x-request-id", f"req_{request_id}")]
        return json_response(refused.status, payload, extra)

    def scripted(self, status: int) -> RequestRefused:
        """Return the error a script asks for by status."""
        kind, code, message = SCRIPTED.get(
            status, ("server_error", None, f"simulated status {status}")
        )
        return RequestRefused(message, status=status, type=kind, code=code)

    def limit_headers(self, window: LimitWindow) -> list[tuple[str, str]]:
        """``x-ratelimit-limit-requests`` (per minute), ``-remaining-requests`` and
        ``-reset-requests`` (until the bucket is full, a Go duration)."""
        return [
            ("x-ratelimit-limit-requests", str(window.requests_per_minute)),
            ("x-ratelimit-remaining-requests", str(window.remaining)),
            ("x-ratelimit-reset-requests", go_duration_text(window.reset_s)),
        ]

    def rate_limited(
        self, request_id: str, retry_after: float | None, window: LimitWindow | None = None
    ) -> WireResponse:
        """429 ``rate_limit_exceeded`` with ``retry-after`` and ``retry-after-ms``."""
        if window is None:
            headers = retry_after_header(retry_after)
            refused = self.scripted(429)
        else:
            wait = retry_after or 0.0
            headers = [("retry-after", str(whole_seconds(wait))), *self.limit_headers(window)]
            limit, text = window.requests_per_minute, go_duration_text(wait)
            refused = RequestRefused(
                RATE_LIMITED.format(limit=limit, wait=text),
                status=429,
                type="requests",
                code="rate_limit_exceeded",
            )
        if retry_after is not None:
            headers.append(("retry-after-ms", str(math.ceil(retry_after * 1000 - 1e-6))))
        return self._answer(refused, request_id, headers)

    def overloaded(
        self, request_id: str, status: int | None = None, retry_after: float | None = None
    ) -> WireResponse:
        """503 ``server_error``: "The engine is currently overloaded, please try again later."."""
        message = SCRIPTED[503][2]
        refused = RequestRefused(message, status=status or 503, type="server_error")
        return self._answer(refused, request_id, retry_after_header(retry_after))

    def quota_exhausted(self, request_id: str) -> WireResponse:
        """429 ``insufficient_quota``: "You exceeded your current quota, ..."."""
        refused = RequestRefused(
            QUOTA, status=429, type="insufficient_quota", code="insufficient_quota"
        )
        return self._answer(refused, request_id, [])

    def not_found(self, method: str, path: str) -> RequestRefused:
        """``Invalid URL (POST /chat/completions)``, as api.openai.com answers."""
        return RequestRefused(
            f"Invalid URL ({method} {path})", status=404, type="invalid_request_error"
        )

    def method_not_allowed(self, method: str, path: str) -> RequestRefused:
        """``Invalid method for URL (GET /v1/chat/completions)``."""
        return RequestRefused(
            f"Invalid method for URL ({method} {path})", status=405, type="invalid_request_error"
        )


def _event(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"
