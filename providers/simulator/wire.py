"""Read the three wire formats the simulator speaks and write answers in their exact shapes.

OpenAI Chat Completions (also what OpenAI-compatible servers speak), Anthropic Messages and
Gemini generateContent: each reader pulls out the system prompt *only from where that API
wants it*, the user text, the model and the output-token limit; each writer produces the
success body, the error body and the request-id header that the real API would send.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import time
from typing import Any

CHARS_PER_TOKEN = 4  # characters per simulated token (usage numbers are estimates)


class WireProtocol(enum.StrEnum):
    """The wire formats the simulator answers."""

    OPENAI = "openai"  #: Chat Completions: ``POST /v1/chat/completions``
    ANTHROPIC = "anthropic"  #: Messages: ``POST /v1/messages``
    GEMINI = "gemini"  #: generateContent: ``POST /v1beta/models/{model}:generateContent``


class WireError(Exception):
    """The request body is not one this API would accept (answered with HTTP 400)."""


@dataclasses.dataclass(frozen=True, slots=True)
class WireRequest:
    """What the simulator needs from one provider request."""

    protocol: WireProtocol
    model: str
    system: str | None  #: the system prompt, found where this API wants it (else None)
    user: str  #: the text of the last user message
    max_tokens: int | None
    tool_name: str | None = None  #: Anthropic: the tool that ``tool_choice`` forces
    store: bool = False  #: OpenAI: keep the completion for a later lookup (``store: true``)
    metadata: dict[str, str] | None = None  #: OpenAI: the ``metadata`` pairs sent with it


@dataclasses.dataclass(frozen=True, slots=True)
class Reply:
    """What the simulated model writes: a JSON value, or text that is not one."""

    text: str  #: the text as the model would write it
    value: Any = None  #: the JSON value, when the text is exactly one (Anthropic tool input)
    structured: bool = False  #: ``value`` is meaningful


def estimate_tokens(text: str) -> int:
    """Return a deterministic token count for usage numbers."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def _text_of(content: Any) -> str:
    """Join the text of a string or a list of text parts/blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return ""


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_request(
    protocol: WireProtocol, body: dict[str, Any], path_model: str | None
) -> WireRequest:
    """Read one request body of ``protocol``; raise ``WireError`` if the API would reject it."""
    if protocol is WireProtocol.OPENAI:
        return _parse_openai(body)
    if protocol is WireProtocol.ANTHROPIC:
        return _parse_anthropic(body)
    return _parse_gemini(body, path_model or "")


def _parse_openai(body: dict[str, Any]) -> WireRequest:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise WireError("'messages' must be a non-empty array")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise WireError("'model' is required")
    system_parts = [
        _text_of(m.get("content"))
        for m in messages
        if isinstance(m, dict) and m.get("role") in ("system", "developer")
    ]
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    if not users:
        raise WireError("'messages' must contain a user message")
    limit = _int_or_none(body.get("max_completion_tokens")) or _int_or_none(body.get("max_tokens"))
    store = body.get("store", False)
    if store is not None and not isinstance(store, bool):
        raise WireError("'store' must be a boolean")
    return WireRequest(
        protocol=WireProtocol.OPENAI,
        model=model,
        system="\n".join(system_parts) if system_parts else None,
        user=_text_of(users[-1].get("content")),
        max_tokens=limit,
        store=bool(store),
        metadata=_openai_metadata(body.get("metadata")),
    )


#: OpenAI's limits on ``metadata``: pairs, key length, value length (characters).
METADATA_PAIRS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512


def _openai_metadata(value: Any) -> dict[str, str] | None:
    """Check ``metadata`` as OpenAI does: at most 16 string pairs, keys 64, values 512 chars."""
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > METADATA_PAIRS:
        raise WireError(f"'metadata' must be an object of at most {METADATA_PAIRS} pairs")
    for key, item in value.items():
        if not isinstance(item, str) or len(key) > METADATA_KEY_CHARS:
            raise WireError(
                f"'metadata' keys are at most {METADATA_KEY_CHARS} characters "
                "and values must be strings"
            )
        if len(item) > METADATA_VALUE_CHARS:
            raise WireError(f"'metadata' values are at most {METADATA_VALUE_CHARS} characters")
    return {str(k): str(v) for k, v in value.items()}


def _parse_anthropic(body: dict[str, Any]) -> WireRequest:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise WireError("messages: field required")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise WireError("model: field required")
    max_tokens = _int_or_none(body.get("max_tokens"))
    if max_tokens is None:
        raise WireError("max_tokens: field required")
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "system":
            raise WireError(
                'messages: Unexpected role "system". The Messages API accepts a top-level '
                '`system` parameter, not "system" as an input message role.'
            )
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    if not users:
        raise WireError("messages: must contain a user message")
    tool_name = None
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "tool":
        tool_name = choice.get("name") if isinstance(choice.get("name"), str) else None
        tools = body.get("tools") or []
        if tool_name not in {t.get("name") for t in tools if isinstance(t, dict)}:
            raise WireError(f"tool_choice: tool {tool_name!r} is not in tools")
    system = body.get("system")
    return WireRequest(
        protocol=WireProtocol.ANTHROPIC,
        model=model,
        system=_text_of(system) if system is not None else None,
        user=_text_of(users[-1].get("content")),
        max_tokens=max_tokens,
        tool_name=tool_name,
    )


def _parse_gemini(body: dict[str, Any], model: str) -> WireRequest:
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise WireError("* GenerateContentRequest.contents: contents is not specified")
    users = [c for c in contents if isinstance(c, dict) and c.get("role", "user") == "user"]
    if not users:
        raise WireError("* GenerateContentRequest.contents: no user content")
    instruction = body.get("systemInstruction") or body.get("system_instruction")
    system = _text_of(instruction.get("parts")) if isinstance(instruction, dict) else None
    config = body.get("generationConfig") or {}
    return WireRequest(
        protocol=WireProtocol.GEMINI,
        model=model,
        system=system,
        user=_text_of(users[-1].get("parts")),
        max_tokens=_int_or_none(config.get("maxOutputTokens"))
        if isinstance(config, dict)
        else None,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class WireResponse:
    """One HTTP answer: status, headers and the complete body."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


def _json_response(status: int, payload: Any, extra: list[tuple[str, str]]) -> WireResponse:
    body = json.dumps(payload, separators=(",", ":")).encode()
    headers = [(b"content-type", b"application/json")]
    headers += [(k.encode(), v.encode()) for k, v in extra]
    headers.append((b"content-length", str(len(body)).encode()))
    return WireResponse(status, headers, body)


def request_id_header(protocol: WireProtocol) -> str | None:
    """Return the header each API uses for its request id."""
    return {
        WireProtocol.OPENAI: "x-request-id",
        WireProtocol.ANTHROPIC: "request-id",
    }.get(protocol)


def render_success(
    req: WireRequest, reply: Reply, request_id: str, *, now: float | None = None
) -> WireResponse:
    """Write a successful answer in the exact shape of ``req.protocol``'s API."""
    text = reply.text
    structured = reply.structured
    truncated = req.max_tokens is not None and estimate_tokens(text) > req.max_tokens
    if truncated:
        assert req.max_tokens is not None
        text = text[: req.max_tokens * CHARS_PER_TOKEN]
        structured = False
    input_tokens = estimate_tokens((req.system or "") + req.user)
    output_tokens = estimate_tokens(text)
    created = int(now if now is not None else time.time())
    if req.protocol is WireProtocol.OPENAI:
        payload: dict[str, Any] = {
            "id": f"chatcmpl-{request_id}",
            "object": "chat.completion",
            "created": created,
            "model": req.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "length" if truncated else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": input_tokens,
                "completion_tokens": output_tokens,
                "total_tokens": input_tokens + output_tokens,
            },
            "system_fingerprint": "fp_onejob_sim",
        }
        return _json_response(200, payload, [("x-request-id", f"req_{request_id}")])
    if req.protocol is WireProtocol.ANTHROPIC:
        if req.tool_name is not None and structured and isinstance(reply.value, dict):
            content: list[dict[str, Any]] = [
                {
                    "type": "tool_use",
                    "id": f"toolu_{request_id}",
                    "name": req.tool_name,
                    "input": reply.value,
                }
            ]
            stop = "tool_use"
        else:
            content = [{"type": "text", "text": text}]
            stop = "end_turn"
        payload = {
            "id": f"msg_{request_id}",
            "type": "message",
            "role": "assistant",
            "model": req.model,
            "content": content,
            "stop_reason": "max_tokens" if truncated else stop,
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        }
        return _json_response(200, payload, [("request-id", f"req_{request_id}")])
    payload = {
        "candidates": [
            {
                "content": {"parts": [{"text": text}], "role": "model"},
                "finishReason": "MAX_TOKENS" if truncated else "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": input_tokens,
            "candidatesTokenCount": output_tokens,
            "totalTokenCount": input_tokens + output_tokens,
        },
        "modelVersion": req.model,
        "responseId": request_id,
    }
    return _json_response(200, payload, [])


_OPENAI_ERRORS = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}
_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_GEMINI_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def render_error(
    protocol: WireProtocol,
    status: int,
    message: str,
    request_id: str,
    *,
    retry_after: float | None = None,
) -> WireResponse:
    """Write an error answer in the exact shape of ``protocol``'s API."""
    extra: list[tuple[str, str]] = []
    if retry_after is not None:
        seconds = int(retry_after) if float(retry_after).is_integer() else retry_after
        extra.append(("retry-after", str(seconds)))
    if protocol is WireProtocol.OPENAI:
        kind, code = _OPENAI_ERRORS.get(status, ("server_error", None))
        payload: dict[str, Any] = {
            "error": {"message": message, "type": kind, "param": None, "code": code}
        }
        extra.append(("x-request-id", f"req_{request_id}"))
    elif protocol is WireProtocol.ANTHROPIC:
        payload = {
            "type": "error",
            "error": {"type": _ANTHROPIC_ERRORS.get(status, "api_error"), "message": message},
            "request_id": f"req_{request_id}",
        }
        extra.append(("request-id", f"req_{request_id}"))
    else:
        payload = {
            "error": {
                "code": status,
                "message": message,
                "status": _GEMINI_STATUS.get(status, "UNKNOWN"),
            }
        }
    return _json_response(status, payload, extra)
