"""What can go wrong when calling onejob, and what the caller should do about it.

::

    OnejobError
    ├── Unavailable            retried until the deadline, never answered: 503, 429, 502,
    │   │                      504, connection errors, timeouts. Safe to try again later
    │   │                      with the same intention (same key, same body).
    │   └── QueueFull          the last answer was 503 queue-full: the gateway has too many
    │                          jobs waiting to be sent, and made none for this key
    ├── StreamUnsupported      the gateway answers the events path without a stream
    └── ProblemError           any other answer that is not a success (RFC 9457 problem)
        ├── KeyReused          409: this key already made a job from another request
        ├── AttemptInProgress  409: an attempt of the job is starting, running or unknown
        ├── JobClosed          409: the job already succeeded or was cancelled
        ├── InvalidKey         400: the Idempotency-Key itself was refused
        ├── Unauthorized       401: no, unknown or revoked API key
        ├── Forbidden          403: an admin route without the admin scope
        ├── NotFound           404: no such job (another owner's job is 404 too)
        ├── InvalidInput       422: the body or the input breaks the contract's schema
        ├── UnknownContract    422: no such contract in the catalog
        ├── UnknownProvider    422: no such provider configured
        └── FallbackNotCertified  422: that provider may not stand in for the primary

Each class's docstring is its default message. Only ``Unavailable`` is worth retrying,
and the client has already done so; every ``ProblemError`` would come back the same.
"""

from __future__ import annotations

from typing import Any

PROBLEM_BASE = "urn:onejob:"
#: The problem type of a creation refused because the gateway's queue is full (503).
QUEUE_FULL = PROBLEM_BASE + "queue-full"


class OnejobError(Exception):
    """The call to onejob did not give what was asked."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (type(self).__doc__ or "").strip())


class Unavailable(OnejobError):
    """onejob did not answer in time; retrying later with the same intention is safe."""

    def __init__(
        self,
        message: str | None = None,
        *,
        tries: int = 0,
        last_status: int | None = None,
        outcome: str | None = None,
    ) -> None:
        super().__init__(message)
        self.tries = tries  #: requests sent, all with the same key and body
        self.last_status = last_status  #: the last HTTP status, None when none came
        #: a 503's ``outcome``: ``unknown`` (may have been written) or ``not_done``
        self.outcome = outcome


class QueueFull(Unavailable):
    """onejob's queue is full and no job was made; retrying later with the same intention
    is safe."""


class StreamUnsupported(OnejobError):
    """The gateway answered the events path without an event stream."""


class ProblemError(OnejobError):
    """onejob refused the request (an RFC 9457 problem); the same request gets the same."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem  #: the whole problem document
        self.type: str = str(problem.get("type", "about:blank"))
        self.title: str = str(problem.get("title", ""))
        self.detail: str = str(problem.get("detail", ""))
        super().__init__(f"{status} {self.title or self.type}: {self.detail}".rstrip(": "))


class KeyReused(ProblemError):
    """This Idempotency-Key already made a job from a different request."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        super().__init__(status, problem)
        #: the job the key already names: fetch it, or make a new intention for new input
        self.job_id: str = str(problem.get("job_id", ""))


class AttemptInProgress(ProblemError):
    """An attempt of this job is starting, running or unknown: wait, do not retry it."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        super().__init__(status, problem)
        self.attempt_id: str = str(problem.get("attempt_id", ""))  #: the blocking attempt
        self.attempt_state: str = str(problem.get("attempt_state", ""))  #: its state


class JobClosed(ProblemError):
    """The job already succeeded or was cancelled."""


class InvalidKey(ProblemError):
    """The Idempotency-Key was refused (missing, too long, not printable ASCII)."""


class Unauthorized(ProblemError):
    """The API key is missing, unknown or revoked."""


class Forbidden(ProblemError):
    """The API key lacks the scope this route needs."""


class NotFound(ProblemError):
    """No such job for this API key."""


class InvalidInput(ProblemError):
    """The request does not match the contract's schema."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        super().__init__(status, problem)
        self.errors: list[str] = [str(e) for e in problem.get("errors") or []]  #: one per fault


class UnknownContract(ProblemError):
    """No such contract in the gateway's catalog."""


class UnknownProvider(ProblemError):
    """No such provider is configured."""


class FallbackNotCertified(ProblemError):
    """That provider is not certified to stand in for the job's primary."""


#: Problem type (after ``urn:onejob:``) -> the error raised for it.
BY_TYPE: dict[str, type[ProblemError]] = {
    "idempotency-key-reused": KeyReused,
    "attempt-in-progress": AttemptInProgress,
    "job-closed": JobClosed,
    "invalid-idempotency-key": InvalidKey,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "not-found": NotFound,
    "invalid-input": InvalidInput,
    "unknown-contract": UnknownContract,
    "unknown-provider": UnknownProvider,
    "fallback-not-certified": FallbackNotCertified,
}


def problem_error(status: int, problem: dict[str, Any]) -> ProblemError:
    """Return the most specific error for a problem answer."""
    kind = str(problem.get("type", ""))
    cls = BY_TYPE.get(kind.removeprefix(PROBLEM_BASE), ProblemError)
    return cls(status, problem)
