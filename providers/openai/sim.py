"""The simulated Chat Completions wire: ``POST /v1/chat/completions``, JSON or SSE."""

from __future__ import annotations

import json
from typing import Any

from providers.base import RequestRefused
from providers.openai.rules import check_request
from providers.sim_wire import (
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
        if req.include_usage:
            events.append(_event({**chunk_head, "choices": [], "usage": usage}))
        events.append(b"data: [DONE]\n\n")
        return sse_response(events, extra)

    def error(
        self, refused: RequestRefused, request_id: str, retry_after: float | None = None
    ) -> WireResponse:
        """Write ``{"error": {message, type, param, code}}`` with ``x-request-id``."""
        kind, code, _ = SCRIPTED.get(refused.status, ("server_error", None, ""))
        payload = {
            "error": {
                "message": refused.message,
                "type": refused.type or kind,
                "param": refused.param,
                "code": refused.code if refused.type else code,
            }
        }
        extra = [*retry_after_header(retry_after), ("x-request-id", f"req_{request_id}")]
        return json_response(refused.status, payload, extra)

    def scripted(self, status: int) -> RequestRefused:
        """Return the error a script asks for by status."""
        kind, code, message = SCRIPTED.get(
            status, ("server_error", None, f"simulated status {status}")
        )
        return RequestRefused(message, status=status, type=kind, code=code)

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
