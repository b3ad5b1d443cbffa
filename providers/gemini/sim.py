"""The simulated Gemini wire: ``:generateContent`` and ``:streamGenerateContent``."""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any

from providers.base import RequestRefused
from providers.gemini.capacity import QUOTA_FAILURE, RETRY_INFO, duration_text
from providers.gemini.rules import check_request
from providers.gemini.schema import camel
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
    sse_response,
    text_of,
)

_PATH = re.compile(r"^/v1(?:beta|alpha)?/models/([^/:]+):(generateContent|streamGenerateContent)$")
#: The ``google.rpc.Code`` name of each HTTP status (https://cloud.google.com/apis/design/errors).
STATUS = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
    404: "NOT_FOUND", 409: "ABORTED", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED",
    500: "INTERNAL", 501: "UNIMPLEMENTED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED",
}  # fmt: skip
SCRIPTED = {
    400: "Request contains an invalid argument.",
    401: "Request had invalid authentication credentials.",
    403: "The caller does not have permission",
    404: "Requested entity was not found.",
    429: "Resource has been exhausted (e.g. check quota).",
    500: "An internal error has occurred. Please retry or report in "
    "https://developers.generativeai.google/guide/troubleshooting",
    503: "The model is overloaded. Please try again later.",
}
#: The Gemini API's words for a spent quota, per minute or per day alike; ``details`` say which.
QUOTA_MESSAGE = (
    "You exceeded your current quota, please check your plan and billing details. For more "
    "information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. To "
    "monitor your current usage, head to: https://ai.dev/rate-limit. \n* Quota exceeded for "
    "metric: {metric}, limit: {limit}"
)
PER_MINUTE = ("generativelanguage.googleapis.com/generate_requests_per_model",
              "GenerateRequestsPerMinutePerProjectPerModel")  # fmt: skip
PER_DAY = ("generativelanguage.googleapis.com/generate_requests_per_model_per_day",
           "GenerateRequestsPerDayPerProjectPerModel")  # fmt: skip
HELP = {
    "@type": "type.googleapis.com/google.rpc.Help",
    "links": [
        {
            "description": "Learn more about Gemini API quotas",
            "url": "https://ai.google.dev/gemini-api/docs/rate-limits",
        }
    ],
}


class GeminiWire:
    """Gemini generateContent as the simulator speaks it."""

    protocol = "gemini"

    def match(self, path: str) -> RouteMatch | None:
        """Answer ``/v1beta/models/{model}:generateContent`` and ``:streamGenerateContent``."""
        m = _PATH.match(path)
        if m is None:
            return None
        return RouteMatch(urllib.parse.unquote(m.group(1)), m.group(2) == "streamGenerateContent")

    def claims(self, path: str) -> bool:
        """Claim ``models/...`` paths and anything with a Gemini method suffix."""
        return "/models/" in path or "GenerateContent" in path or "generateContent" in path

    def parse(self, body: dict[str, Any], route: RouteMatch, query: str) -> WireRequest:
        """Read a generateContent request after the API's own checks."""
        check_request(body)
        body = {camel(k): v for k, v in body.items()}
        users = [c for c in body["contents"] if c.get("role", "user") == "user"]
        if not users:
            raise RequestRefused("the simulator needs user content", type="INVALID_ARGUMENT")
        instruction = body.get("systemInstruction")
        system = text_of(instruction.get("parts")) if isinstance(instruction, dict) else None
        config = {camel(k): v for k, v in (body.get("generationConfig") or {}).items()}
        sse = "sse" in urllib.parse.parse_qs(query).get("alt", [])
        return WireRequest(
            protocol=self.protocol,
            model=route.path_model or "",
            system=system,
            user=text_of(users[-1].get("parts")),
            max_tokens=int_or_none(config.get("maxOutputTokens")),
            stream=route.stream,
            sse=sse,
        )

    def success(self, req: WireRequest, reply: Reply, request_id: str, now: float) -> WireResponse:
        """Write a ``GenerateContentResponse``, or the stream of them."""
        answer = cut(req, reply)
        finish = "MAX_TOKENS" if answer.truncated else "STOP"

        def response(text: str, final: bool, usage_out: int) -> dict[str, Any]:
            candidate: dict[str, Any] = {"content": {"parts": [{"text": text}], "role": "model"}}
            if final:
                candidate["finishReason"] = finish
            candidate["index"] = 0
            return {
                "candidates": [candidate],
                "usageMetadata": {
                    "promptTokenCount": answer.input_tokens,
                    "candidatesTokenCount": usage_out,
                    "totalTokenCount": answer.input_tokens + usage_out,
                },
                "modelVersion": req.model,
                "responseId": request_id,
            }

        if not req.stream:
            return json_response(200, response(answer.text, True, answer.output_tokens))
        parts = pieces(answer.text)
        chunks = [
            response(piece, i == len(parts) - 1, answer.output_tokens if i == len(parts) - 1 else 0)
            for i, piece in enumerate(parts)
        ]
        if req.sse:
            events = [b"data: " + _dumps(c) + b"\r\n\r\n" for c in chunks]
            return sse_response(events)
        return json_response(200, chunks)

    def error(
        self, refused: RequestRefused, request_id: str, retry_after: float | None = None
    ) -> WireResponse:
        """Write ``{"error": {code, message, status}}``; a wait is a ``RetryInfo`` detail
        (Gemini sends no ``Retry-After`` header)."""
        return self._answer(refused, _retry_info(retry_after))

    def limit_headers(self, window: LimitWindow) -> list[tuple[str, str]]:
        """None: Gemini announces no limits in headers."""
        return []

    def rate_limited(
        self, request_id: str, retry_after: float | None, window: LimitWindow | None = None
    ) -> WireResponse:
        """429 ``RESOURCE_EXHAUSTED`` with a per-minute ``QuotaFailure`` and a ``RetryInfo``."""
        limit = window.requests_per_minute if window is not None else None
        violation = {"quotaMetric": PER_MINUTE[0], "quotaId": PER_MINUTE[1]}
        if limit is not None:
            violation["quotaValue"] = str(limit)
        if limit is None:  # a scripted 429: the API's short wording
            message = SCRIPTED[429]
        else:
            message = QUOTA_MESSAGE.format(metric=PER_MINUTE[0], limit=limit)
            message += f"\nPlease retry in {retry_after or 0.0:.3f}s."
        details = [HELP, {"@type": QUOTA_FAILURE, "violations": [violation]}]
        refused = RequestRefused(message, status=429, type=STATUS[429])
        return self._answer(refused, details + _retry_info(retry_after))

    def overloaded(
        self, request_id: str, status: int | None = None, retry_after: float | None = None
    ) -> WireResponse:
        """503 ``UNAVAILABLE``: "The model is overloaded. Please try again later."."""
        code = status or 503
        refused = RequestRefused(SCRIPTED[503], status=code, type=STATUS.get(code, "UNKNOWN"))
        return self._answer(refused, _retry_info(retry_after))

    def quota_exhausted(self, request_id: str) -> WireResponse:
        """429 ``RESOURCE_EXHAUSTED`` whose ``QuotaFailure`` names the per-day quota."""
        violation = {"quotaMetric": PER_DAY[0], "quotaId": PER_DAY[1]}
        message = QUOTA_MESSAGE.format(metric=PER_DAY[0], limit=0)
        details = [HELP, {"@type": QUOTA_FAILURE, "violations": [violation]}]
        return self._answer(RequestRefused(message, status=429, type=STATUS[429]), details)

    def _answer(self, refused: RequestRefused, details: list[dict[str, Any]]) -> WireResponse:
        error: dict[str, Any] = {
            "code": refused.status,
            "message": refused.message,
            "status": refused.type or STATUS.get(refused.status, "UNKNOWN"),
        }
        if details:
            error["details"] = details
        return json_response(refused.status, {"error": error})

    def scripted(self, status: int) -> RequestRefused:
        """Return the error a script asks for by status."""
        message = SCRIPTED.get(status, f"simulated status {status}")
        return RequestRefused(message, status=status, type=STATUS.get(status, "UNKNOWN"))

    def not_found(self, method: str, path: str) -> RequestRefused:
        """``NOT_FOUND``, as Google APIs answer an unknown method or path."""
        return RequestRefused(f"Method not found: {method} {path}", status=404, type="NOT_FOUND")

    def method_not_allowed(self, method: str, path: str) -> RequestRefused:
        """Google front ends answer a wrong HTTP method like an unknown path."""
        return self.not_found(method, path)


def _retry_info(retry_after: float | None) -> list[dict[str, Any]]:
    """Return the ``RetryInfo`` detail that asks for ``retry_after`` seconds, if any."""
    if retry_after is None:
        return []
    return [{"@type": RETRY_INFO, "retryDelay": duration_text(retry_after)}]


def _dumps(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
