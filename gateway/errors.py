"""Request problems the service layer raises; the HTTP layer turns each into RFC 9457 JSON.

Business outcomes (replayed, conflict, blocked, lost the race) are *returned* values, not
exceptions; what is here means "this request cannot be served as asked".

Exception tree (``type`` is the problem type URN, ``status`` the HTTP status)::

    GatewayError                      any request problem (500 only if raised bare)
    ├── BadRequest                    400
    │   ├── InvalidIdempotencyKey     400 urn:onejob:invalid-idempotency-key
    │   └── MalformedJson             400 urn:onejob:malformed-json
    ├── Unauthorized                  401 urn:onejob:unauthorized (WWW-Authenticate: Bearer)
    ├── Forbidden                     403 urn:onejob:forbidden
    ├── NotFound                      404 urn:onejob:not-found
    ├── MethodNotAllowed              405 urn:onejob:method-not-allowed
    ├── PayloadTooLarge               413 urn:onejob:payload-too-large
    └── Unprocessable                 422
        ├── InvalidInput              422 urn:onejob:invalid-input (``errors`` list)
        ├── UnknownContract           422 urn:onejob:unknown-contract
        ├── UnknownProvider           422 urn:onejob:unknown-provider
        └── FallbackNotCertified      422 urn:onejob:fallback-not-certified
    └── QueueFull                     503 urn:onejob:queue-full (Retry-After)

(A lost database is answered 503 ``urn:onejob:unavailable`` by the HTTP layer, which
tells it from a bug: ``gateway.http.responses``.)
"""

from __future__ import annotations

from typing import Any, ClassVar


class GatewayError(Exception):
    """The gateway could not serve the request."""

    type: ClassVar[str] = "urn:onejob:internal-error"
    status: ClassVar[int] = 500
    title: ClassVar[str] = "Internal error"

    def __init__(self, detail: str | None = None, **extra: Any) -> None:
        super().__init__(detail or (self.__doc__ or "").strip())
        #: Members added to the problem document (``errors``, ``job_id`` ...).
        self.extra: dict[str, Any] = extra

    @property
    def detail(self) -> str:
        """Return the human-readable explanation."""
        return str(self)

    def headers(self) -> dict[str, str]:
        """Return extra response headers this problem needs."""
        return {}


class BadRequest(GatewayError):
    """The request is malformed."""

    type = "urn:onejob:bad-request"
    status = 400
    title = "Bad request"


class InvalidIdempotencyKey(BadRequest):
    """Idempotency-Key must be given once: an sf-string or token of 1-255 printable ASCII."""

    type = "urn:onejob:invalid-idempotency-key"
    title = "Invalid Idempotency-Key"


class MalformedJson(BadRequest):
    """The request body is not valid JSON."""

    type = "urn:onejob:malformed-json"
    title = "Malformed JSON"


class Unauthorized(GatewayError):
    """A valid API key is required: Authorization: Bearer <key>."""

    type = "urn:onejob:unauthorized"
    status = 401
    title = "Unauthorized"

    def headers(self) -> dict[str, str]:
        """Ask for a bearer token."""
        return {"WWW-Authenticate": 'Bearer realm="onejob"'}


class Forbidden(GatewayError):
    """This API key may not do that."""

    type = "urn:onejob:forbidden"
    status = 403
    title = "Forbidden"


class NotFound(GatewayError):
    """No such resource."""

    type = "urn:onejob:not-found"
    status = 404
    title = "Not found"


class MethodNotAllowed(GatewayError):
    """This method is not allowed on this path."""

    type = "urn:onejob:method-not-allowed"
    status = 405
    title = "Method not allowed"


class PayloadTooLarge(GatewayError):
    """The request body is larger than the gateway accepts."""

    type = "urn:onejob:payload-too-large"
    status = 413
    title = "Payload too large"


class Unprocessable(GatewayError):
    """The request is well-formed but cannot be processed."""

    type = "urn:onejob:unprocessable"
    status = 422
    title = "Unprocessable request"


class InvalidInput(Unprocessable):
    """The request does not match what the gateway or the contract expects."""

    type = "urn:onejob:invalid-input"
    title = "Invalid input"

    #: At most this many errors are reported; a huge invalid body must not echo back huge.
    MAX_ERRORS: ClassVar[int] = 50

    def __init__(self, detail: str | None = None, *, errors: list[str] | None = None) -> None:
        errs = list(errors or ([detail] if detail else []))
        if len(errs) > self.MAX_ERRORS:
            errs = [*errs[: self.MAX_ERRORS], f"... and {len(errs) - self.MAX_ERRORS} more"]
        errs = [e if len(e) <= 500 else e[:500] + "..." for e in errs]
        super().__init__(detail or "; ".join(errs) or None, errors=errs)

    @property
    def errors(self) -> list[str]:
        """Return the individual validation errors."""
        return list(self.extra["errors"])


class UnknownContract(Unprocessable):
    """No contract of that name is in the catalog."""

    type = "urn:onejob:unknown-contract"
    title = "Unknown contract"


class UnknownProvider(Unprocessable):
    """No provider of that name is configured."""

    type = "urn:onejob:unknown-provider"
    title = "Unknown provider"


class FallbackNotCertified(Unprocessable):
    """The provider is not a certified fallback for this job's contract and primary."""

    type = "urn:onejob:fallback-not-certified"
    title = "Fallback not certified"


class QueueFull(GatewayError):
    """Too many jobs are waiting to be sent; nothing was created. Retry later with the same
    Idempotency-Key (a job that key already made is still answered)."""

    type = "urn:onejob:queue-full"
    status = 503
    title = "Queue full"

    def __init__(self, detail: str | None = None, *, retry_after: int = 5, **extra: Any) -> None:
        super().__init__(detail, **extra)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        """Say when to come back."""
        return {"Retry-After": str(self.retry_after)}
