"""What a protocol plug-in implements to be simulated, and what every simulated wire shares.

A plug-in's ``SimWire`` (``providers/openai/sim.py`` ...) claims its API paths, reads a
request body with that API's request rules (refusing what the real API refuses), and writes
answers in the exact shapes the real API sends: the complete JSON body, the SSE stream when
the request asks to stream, and the error envelope.

It lives beside the plug-ins rather than in ``providers/simulator/``: the simulator serves
every registered plug-in (``providers.registry``), so the plug-ins must not import the
simulator's package, nor load its server when the gateway imports them.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Protocol

from providers.base import RequestRefused

CHARS_PER_TOKEN = 4  # characters per simulated token (usage numbers are estimates)
STREAM_CHUNK_CHARS = 24  # characters of answer text per streamed delta


@dataclasses.dataclass(frozen=True, slots=True)
class RouteMatch:
    """A request path one wire format answers."""

    path_model: str | None = None  #: the model named in the path (Gemini)
    stream: bool = False  #: the path itself asks for a stream (``:streamGenerateContent``)


@dataclasses.dataclass(frozen=True, slots=True)
class WireRequest:
    """What the simulator needs from one provider request."""

    protocol: str
    model: str
    system: str | None  #: the system prompt, found where this API wants it (else None)
    user: str  #: the text of the last user message
    max_tokens: int | None
    tool_name: str | None = None  #: Anthropic: the tool that ``tool_choice`` forces
    store: bool = False  #: OpenAI: keep the completion for a later lookup (``store: true``)
    metadata: dict[str, str] | None = None  #: OpenAI: the ``metadata`` pairs sent with it
    stream: bool = False  #: answer as a server-sent event stream
    include_usage: bool = False  #: OpenAI ``stream_options.include_usage``
    sse: bool = True  #: stream as server-sent events (Gemini without ``alt=sse``: a JSON array)


@dataclasses.dataclass(frozen=True, slots=True)
class Reply:
    """What the simulated model writes: a JSON value, or text that is not one."""

    text: str  #: the text as the model would write it
    value: Any = None  #: the JSON value, when the text is exactly one (Anthropic tool input)
    structured: bool = False  #: ``value`` is meaningful
    #: The answer's envelope says its token usage (OpenAI wire: the ``usage`` object);
    #: False for servers that omit it (the ``no-usage`` profile).
    usage: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class WireResponse:
    """One HTTP answer: status, headers and the complete body (an SSE stream is one too)."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    #: For streams: the body in the pieces the server sends one by one.
    chunks: tuple[bytes, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    """A reply cut to the request's output limit, with its usage numbers."""

    text: str
    structured: bool
    truncated: bool
    input_tokens: int
    output_tokens: int


@dataclasses.dataclass(frozen=True, slots=True)
class LimitWindow:
    """Where a simulated provider's request bucket stands, for the headers that say so."""

    requests_per_minute: int  #: the limit, as the APIs state it (per second x 60)
    remaining: int  #: whole requests left in the bucket now
    reset_s: float  # seconds until the bucket is full again
    retry_after_s: float  # seconds until the next request may pass (0: now)
    now: float  # Unix seconds, for APIs that say when as a time (Anthropic)


class SimWire(Protocol):
    """One simulated wire format."""

    protocol: str  #: the plug-in's protocol name (``openai``)

    def match(self, path: str) -> RouteMatch | None:
        """Return how ``path`` (without ``/p/{provider}``) is answered, or None."""
        ...

    def claims(self, path: str) -> bool:
        """Say whether a path nobody answers looks meant for this API (for its 404 shape)."""
        ...

    def parse(self, body: dict[str, Any], route: RouteMatch, query: str) -> WireRequest:
        """Read a request body; raise ``RequestRefused`` for what the real API refuses."""
        ...

    def success(self, req: WireRequest, reply: Reply, request_id: str, now: float) -> WireResponse:
        """Write the answer (a complete body, or the SSE stream when ``req.stream``)."""
        ...

    def error(
        self, refused: RequestRefused, request_id: str, retry_after: float | None = None
    ) -> WireResponse:
        """Write an error in this API's envelope."""
        ...

    def scripted(self, status: int) -> RequestRefused:
        """Return the error a script asks for by status, as this API words it."""
        ...

    def limit_headers(self, window: LimitWindow) -> list[tuple[str, str]]:
        """Return the rate-limit headers this API sends on every answer (none: ``[]``)."""
        ...

    def rate_limited(
        self, request_id: str, retry_after: float | None, window: LimitWindow | None = None
    ) -> WireResponse:
        """Write this API's 429 for a client over its rate limit.

        ``window``: the simulated bucket that refused (its headers, and ``retry_after``
        rounded as the API rounds it); None for a scripted 429, whose ``retry_after`` is
        sent as it was asked.
        """
        ...

    def overloaded(
        self, request_id: str, status: int | None = None, retry_after: float | None = None
    ) -> WireResponse:
        """Write this API's answer while it is overloaded (``status`` None: its usual one)."""
        ...

    def quota_exhausted(self, request_id: str) -> WireResponse:
        """Write this API's answer to a client whose hard quota (billing, a day's) is spent."""
        ...

    def not_found(self, method: str, path: str) -> RequestRefused:
        """Return the API's answer to a path it does not serve."""
        ...

    def method_not_allowed(self, method: str, path: str) -> RequestRefused:
        """Return the API's answer to a known path with the wrong method."""
        ...


def estimate_tokens(text: str) -> int:
    """Return a deterministic token count for usage numbers."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def cut(req: WireRequest, reply: Reply) -> Answer:
    """Cut ``reply`` to the request's output-token limit, as the real APIs do."""
    text, structured = reply.text, reply.structured
    truncated = req.max_tokens is not None and estimate_tokens(text) > req.max_tokens
    if truncated:
        assert req.max_tokens is not None
        text, structured = text[: req.max_tokens * CHARS_PER_TOKEN], False
    return Answer(
        text=text,
        structured=structured,
        truncated=truncated,
        input_tokens=estimate_tokens((req.system or "") + req.user),
        output_tokens=estimate_tokens(text),
    )


def pieces(text: str, size: int = STREAM_CHUNK_CHARS) -> list[str]:
    """Split ``text`` into the deltas a stream sends (at least one, maybe empty)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def text_of(content: Any) -> str:
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


def int_or_none(value: Any) -> int | None:
    """Return ``value`` when it is an int (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def dumps(payload: Any) -> bytes:
    """Serialize compactly, as the APIs do."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def json_response(
    status: int, payload: Any, extra: list[tuple[str, str]] | None = None
) -> WireResponse:
    """Return a complete JSON answer with ``Content-Length``."""
    body = dumps(payload)
    headers = [(b"content-type", b"application/json")]
    headers += [(k.encode(), v.encode()) for k, v in extra or []]
    headers.append((b"content-length", str(len(body)).encode()))
    return WireResponse(status, headers, body)


def sse_response(events: list[bytes], extra: list[tuple[str, str]] | None = None) -> WireResponse:
    """Return a 200 ``text/event-stream`` answer sent event by event (no Content-Length)."""
    headers = [
        (b"content-type", b"text/event-stream; charset=utf-8"),
        (b"cache-control", b"no-cache"),
    ]
    headers += [(k.encode(), v.encode()) for k, v in extra or []]
    return WireResponse(200, headers, b"".join(events), tuple(events))


def retry_after_header(retry_after: float | None) -> list[tuple[str, str]]:
    """Return the ``Retry-After`` header for ``retry_after`` seconds, if any."""
    if retry_after is None:
        return []
    seconds = int(retry_after) if float(retry_after).is_integer() else retry_after
    return [("retry-after", str(seconds))]


def whole_seconds(seconds: float) -> int:
    """Round a wait up to whole seconds, as ``Retry-After`` carries it (a client that waits
    that long finds the request admitted)."""
    return max(0, math.ceil(seconds - 1e-9))


def with_headers(response: WireResponse, extra: list[tuple[str, str]]) -> WireResponse:
    """Return ``response`` with ``extra`` headers added (before its ``Content-Length``)."""
    if not extra:
        return response
    added = [(k.encode(), v.encode()) for k, v in extra]
    return dataclasses.replace(response, headers=[*added, *response.headers])
