"""What crosses the provider seam: one request in, one parsed result out, or an error that
says which kind (the seam itself, ``Provider``, is declared in ``gateway.domain.ports``).

Exception tree (translated at the edge, ``raise ... from exc``, like httpx)::

    ProviderError                 any failure of a provider call
    ├── DefiniteFailure           the provider did not do the work: safe to fail over
    │   ├── ConnectFailed         connection refused, DNS, TLS: nothing was sent
    │   ├── Rejected              400/401/403/404/422: the request itself is wrong
    │   ├── NoCapacity            "not now": the same request may be sent again later
    │   │   ├── RateLimited       429: this client is over its rate limit
    │   │   └── Overloaded        503, 529: the provider is short of capacity for everyone
    │   ├── QuotaExhausted        a hard quota (billing, a daily quota): waiting does not help
    │   ├── Unavailable           500, 501 and any other 5xx not configured unknown
    │   ├── Refused               the model refused or stopped early (length, content filter)
    │   └── BadOutput             the answer arrived but is not parseable JSON of the contract
    └── OutcomeUnknown            the provider may have done the work: never retry blindly
        ├── TimedOut              read timeout after the request was sent
        ├── ConnectionLost        connection dropped mid-response, body ended early
        └── AmbiguousStatus       502/504 (and other statuses configured as unknown)

A ``NoCapacity`` carries ``retry_after`` (the seconds the provider asked for, uncapped;
None when it said nothing) and ``limits`` (``RateLimits``, what its rate-limit headers
said); a successful answer carries its ``RateLimits`` too (``ProviderResult.limits``).
Each protocol's plug-in tells which answers are which (``capacity_of``) and reads its
headers (``limits_of``); ``providers.capacity`` holds what they share.

Two refusals are found before anything is sent; the adapter base turns each into
``Rejected`` (``providers.json_http_adapter``), and the simulator answers a
``RequestRefused`` in the API's error envelope::

    RequestRefused                the API's request rules refuse the body (status, type, code)
    SchemaNotSupported            the contract's schema cannot be said in the API's dialect
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True, slots=True)
class ProviderRequest:
    """One rendered contract call, in protocol-neutral form."""

    system: str  #: the system prompt (placed where each API wants it)
    user: str  #: the user message
    output_schema: dict[str, Any]  #: the contract's output JSON Schema
    schema_name: str  #: a name for the schema (``ticket_triage_v1``), ``[a-zA-Z0-9_-]``
    model: str
    temperature: float = 0.0
    max_output_tokens: int = 1024
    timeout: float = 30.0  # seconds, for the whole call
    idempotency_key: str | None = None  #: downstream key ``<job id>/<attempt number>``
    #: The W3C trace context the call is part of, sent as ``traceparent``/``tracestate``.
    traceparent: str | None = None
    tracestate: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Usage:
    """Token usage as the provider reported it."""

    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class RateLimits:
    """What a provider said about its rate limits on one answer (None: not said).

    Read from the headers each API sends (OpenAI ``x-ratelimit-*``, Anthropic
    ``anthropic-ratelimit-*``; Gemini sends none), so a caller can pace itself before the
    provider has to refuse. Limits are per minute, as every API states them.
    """

    requests_limit: int | None = None  #: requests per minute
    requests_remaining: int | None = None  #: requests left in the current window
    requests_reset_s: float | None = None  # seconds until the requests bucket is full again
    tokens_limit: int | None = None  #: tokens per minute (Anthropic: the tightest token bucket)
    tokens_remaining: int | None = None  #: tokens left in the current window
    tokens_reset_s: float | None = None  # seconds until the tokens bucket is full again

    def said(self) -> bool:
        """Say whether the provider said anything at all."""
        return not (
            self.requests_limit is None
            and self.requests_remaining is None
            and self.requests_reset_s is None
            and self.tokens_limit is None
            and self.tokens_remaining is None
            and self.tokens_reset_s is None
        )

    def exhausted_reset_s(self) -> float | None:
        """Return the seconds until the empty bucket refills (the later of two empty ones).

        None when no bucket is said to be empty: then which one refused is not known.
        """
        resets = [
            reset
            for remaining, reset in (
                (self.requests_remaining, self.requests_reset_s),
                (self.tokens_remaining, self.tokens_reset_s),
            )
            if remaining == 0 and reset is not None
        ]
        return max(resets) if resets else None


@dataclasses.dataclass(frozen=True, slots=True)
class ProviderResult:
    """A successful call: the parsed JSON output and what came with it."""

    output: Any  #: the parsed JSON value (not yet validated against the contract)
    raw_text: str  #: the text the model produced
    request_id: str | None  #: the provider's request id, for support tickets
    usage: Usage
    finish_reason: str | None
    latency: float  # seconds
    model: str | None = None  #: the model that answered, as the provider said
    #: Request parameters the adapter left out because the model refuses them, e.g.
    #: ``("temperature",)``: then the contract's temperature 0 was not applied and the
    #: stability of its answers rests on pass^k alone (certification records that).
    omitted_parameters: tuple[str, ...] = ()
    #: What the answer's headers said about the provider's rate limits (None: nothing).
    limits: RateLimits | None = None


class ProviderError(Exception):
    """A provider call failed."""

    #: ``definite`` or ``unknown``: whether the provider may have done the work.
    outcome: str = "unknown"
    #: Short machine-readable reason (``connect_failed``, ``timeout``, ``status_503`` ...).
    reason: str = "provider_error"

    def __init__(
        self,
        message: str | None = None,
        *,
        reason: str | None = None,
        status_code: int | None = None,
        request_id: str | None = None,
        body_excerpt: str | None = None,
        hint: str | None = None,
    ) -> None:
        message = message or (self.__doc__ or "").strip()
        super().__init__(f"{message} (hint: {hint})" if hint else message)
        if reason is not None:
            self.reason = reason
        self.status_code = status_code
        self.request_id = request_id
        self.body_excerpt = body_excerpt
        #: The usual mistake behind this error ("does base_url end in /v1?"), if one is known.
        self.hint = hint

    def as_dict(self) -> dict[str, Any]:
        """Return a JSON-safe description (never contains secrets)."""
        return {
            "outcome": self.outcome,
            "reason": self.reason,
            "message": str(self),
            "status_code": self.status_code,
            "request_id": self.request_id,
        }


class DefiniteFailure(ProviderError):
    """The provider did not do the work."""

    outcome = "definite"


class ConnectFailed(DefiniteFailure):
    """Could not connect; nothing was sent."""

    reason = "connect_failed"


class Rejected(DefiniteFailure):
    """The provider rejected the request."""

    reason = "rejected"


class NoCapacity(DefiniteFailure):
    """The provider did not take the request now (rate limit, overload): nothing was done,
    and the same request may be sent again later."""

    reason = "no_capacity"
    #: ``rate_limited`` (this client asks too much) or ``overloaded`` (the provider is short).
    capacity: str = "overloaded"

    def __init__(
        self,
        message: str | None = None,
        *,
        retry_after: float | None = None,
        limits: RateLimits | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        #: Seconds the provider asked to wait, uncapped (``Retry-After``, ``retry-after-ms``,
        #: Gemini's ``RetryInfo``; for a 429 without them, the reset of the empty bucket);
        #: None when it said nothing. Capping it is the caller's decision, not ours.
        self.retry_after = retry_after
        #: What the answer's rate-limit headers said, if anything.
        self.limits = limits

    def as_dict(self) -> dict[str, Any]:
        """Return the base description with ``capacity`` and ``retry_after_s`` (ms precision)."""
        retry = None if self.retry_after is None else round(self.retry_after, 3)
        return {**super().as_dict(), "capacity": self.capacity, "retry_after_s": retry}


class RateLimited(NoCapacity):
    """The provider is rate limiting this client."""

    reason = "rate_limited"
    capacity = "rate_limited"


class Overloaded(NoCapacity):
    """The provider is overloaded and did not take the request."""

    reason = "overloaded"
    capacity = "overloaded"


class QuotaExhausted(DefiniteFailure):
    """The provider refused because a hard quota is spent (billing, a daily quota): waiting
    minutes will not help, another provider might."""

    reason = "quota_exhausted"


class Unavailable(DefiniteFailure):
    """The provider failed and did not take the request."""

    reason = "unavailable"


class Refused(DefiniteFailure):
    """The model refused or stopped before finishing its answer."""

    reason = "refused"


class BadOutput(DefiniteFailure):
    """The answer is not the JSON the contract asks for."""

    reason = "bad_output"


class OutcomeUnknown(ProviderError):
    """The provider may or may not have done the work."""

    outcome = "unknown"


class TimedOut(OutcomeUnknown):
    """No answer within the deadline after the request was sent."""

    reason = "timeout"


class ConnectionLost(OutcomeUnknown):
    """The connection broke after the request was sent."""

    reason = "connection_lost"


class AmbiguousStatus(OutcomeUnknown):
    """A gateway status (502/504) that does not say whether the work was done."""

    reason = "ambiguous_status"


class RequestRefused(Exception):
    """A request the real API refuses: its status and the fields of its error envelope."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str | None = None,
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.code = code
        self.param = param


class SchemaNotSupported(ValueError):
    """The contract's schema cannot be said in this API's dialect without changing its meaning."""

    def __init__(self, path: tuple[str, ...], message: str) -> None:
        where = "/".join(path) or "(root)"
        super().__init__(f"at {where}: {message}")
        self.path = path
