"""What crosses the provider seam: one request in, one parsed result out, or an error that
says which kind (the seam itself, ``Provider``, is declared in ``gateway.domain.ports``).

Exception tree (translated at the edge, ``raise ... from exc``, like httpx)::

    ProviderError                 any failure of a provider call
    ├── DefiniteFailure           the provider did not do the work: safe to fail over
    │   ├── ConnectFailed         connection refused, DNS, TLS: nothing was sent
    │   ├── Rejected              400/401/403/404/422: the request itself is wrong
    │   ├── RateLimited           429 (``retry_after`` seconds when the provider said)
    │   ├── Unavailable           503 (and other statuses configured as definite)
    │   ├── Refused               the model refused or stopped early (length, content filter)
    │   └── BadOutput             the answer arrived but is not parseable JSON of the contract
    └── OutcomeUnknown            the provider may have done the work: never retry blindly
        ├── TimedOut              read timeout after the request was sent
        ├── ConnectionLost        connection dropped mid-response, body ended early
        └── AmbiguousStatus       502/504 (and other statuses configured as unknown)

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


@dataclasses.dataclass(frozen=True, slots=True)
class Usage:
    """Token usage as the provider reported it."""

    input_tokens: int | None = None
    output_tokens: int | None = None


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


class RateLimited(DefiniteFailure):
    """The provider is rate limiting this client."""

    reason = "rate_limited"

    def __init__(
        self, message: str | None = None, *, retry_after: float | None = None, **kwargs: Any
    ) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after  # seconds


class Unavailable(DefiniteFailure):
    """The provider is unavailable and did not take the request."""

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
