"""The one place where service outcomes and errors become HTTP responses (RFC 9457 problems)."""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException, InternalServerException, ValidationException

from gateway.domain.records import (
    AddAttemptOutcome,
    AddAttemptResult,
    CreateOutcome,
    CreateResult,
    JobRecord,
    TransitionOutcome,
    TransitionResult,
)
from gateway.domain.states import JobStatus
from gateway.errors import (
    BadRequest,
    Forbidden,
    GatewayError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
)
from gateway.http.views import admin_attempt_view, job_location, job_view
from gateway.logging import CLIENT_GONE_SCOPE_KEY
from gateway.store.failures import database_unavailable, outcome_unknown

log = logging.getLogger("onejob.http")

PROBLEM_JSON = "application/problem+json"
KEY_REUSED = "urn:onejob:idempotency-key-reused"
ATTEMPT_IN_PROGRESS = "urn:onejob:attempt-in-progress"
JOB_CLOSED = "urn:onejob:job-closed"
NOT_UNKNOWN = "urn:onejob:not-unknown"
NOT_READY = "urn:onejob:not-ready"
INTERNAL = "urn:onejob:internal-error"
UNAVAILABLE = "urn:onejob:unavailable"
RETRY_AFTER = 1  # seconds
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a client that hung up; never sent

#: Litestar's own HTTP errors, by status, as this API's problem classes.
_FRAMEWORK_ERRORS: dict[int, type[GatewayError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    413: PayloadTooLarge,
}


def problem(
    status: int,
    type_: str,
    title: str,
    detail: str,
    *,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> Response[Any]:
    """Build an ``application/problem+json`` response."""
    body = {"type": type_, "title": title, "status": status, "detail": detail, **extra}
    return Response(content=body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def error_response(error: GatewayError) -> Response[Any]:
    """Render a request problem raised by the service or the HTTP layer."""
    return problem(
        error.status,
        error.type,
        error.title,
        error.detail,
        headers=error.headers() or None,
        **error.extra,
    )


def handle_exception(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """Turn any exception into a problem; only real bugs become 500 (and are logged)."""
    if isinstance(exc, GatewayError) and exc.status != 500:  # a 503 queue-full too
        return error_response(exc)
    if isinstance(exc, HTTPException) and exc.status_code < 500:
        cls = _FRAMEWORK_ERRORS.get(exc.status_code)
        detail = str(exc.detail or "")
        # Litestar's own headers stay (a 405's ``Allow``, RFC 9110 §15.5.6).
        headers = {**(exc.headers or {})}
        invalid = invalid_params(request, exc)
        if invalid:
            # Name the fields: Litestar's own detail only repeats the request line.
            detail = "; ".join(f"{p['name']}: {p['reason']}" for p in invalid) + "."
            return problem(400, BadRequest.type, BadRequest.title, detail, invalid_params=invalid)
        if cls is not None:
            response = error_response(cls(detail or None))
            response.headers.update(headers)
            return response
        kind = f"urn:onejob:http-{exc.status_code}"
        return problem(exc.status_code, kind, detail, detail, headers=headers or None)
    if _client_gone(request, exc):
        # Litestar raises a 500 when the body stops at an ``http.disconnect``: the client
        # hung up mid-body, which is no bug, and nobody is left to answer.
        log.info("client disconnected on %s %s", request.method, request.url.path)
        return problem(
            CLIENT_CLOSED_REQUEST,
            "urn:onejob:client-closed-request",
            "Client closed request",
            "The client hung up before the request was read.",
        )
    if _unavailable(request, exc):
        # The database (or the network to it) failed: not a bug, and worth a retry. The
        # store logs the outage once (where it started, how long, what failed), not each
        # request; the exception's text may quote a statement and is never logged.
        log.info(
            "database unavailable on %s %s: %s",
            request.method,
            request.url.path,
            type(exc).__name__,
        )
        return unavailable_response(maybe_written=outcome_unknown(exc))
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem(500, INTERNAL, "Internal error", "The gateway hit an unexpected error.")


def invalid_params(request: Request[Any, Any, Any], exc: Exception) -> list[dict[str, str]]:
    """Return the parameters a Litestar validation refused: ``name``, ``in`` and ``reason``."""
    if not isinstance(exc, ValidationException) or not isinstance(exc.extra, list):
        return []
    found = []
    for item in exc.extra:
        if not isinstance(item, dict) or not item.get("key"):
            continue
        name, where = str(item["key"]), str(getattr(item.get("source"), "value", "query"))
        if where == "query" and request.query_params.get(name) == "":
            reason = f"empty: leave {name} out rather than send it empty"
        else:
            reason = str(item.get("message") or "not valid")
        found.append({"name": name, "in": where, "reason": reason})
    return found


def _client_gone(request: Request[Any, Any, Any], exc: Exception) -> bool:
    state: dict[str, Any] = request.scope.get("state") or {}
    return type(exc) is InternalServerException and bool(state.get(CLIENT_GONE_SCOPE_KEY))


def _unavailable(request: Request[Any, Any, Any], exc: Exception) -> bool:
    """Say whether ``exc`` is the database failing (counted by the store, when one runs)."""
    service = getattr(request.app.state, "service", None)
    if service is None:
        return database_unavailable(exc)
    unavailable: bool = service.store.unavailable(exc, f"{request.method} {request.url.path}")
    return unavailable


#: What a 503 says when the request may have been committed: the answer was lost.
MAYBE_WRITTEN = (
    "The database did not answer in time: what this request asked for may or may not have "
    "been done. Retrying it as it was is safe: with the same Idempotency-Key a job that "
    "was created is returned (200, Idempotent-Replayed), and one that was not is created "
    "once."
)
#: What a 503 says when nothing was sent to the database.
NOT_WRITTEN = "The database is not reachable; nothing was done. Retry the request as it was."


def unavailable_response(*, maybe_written: bool = False) -> Response[Any]:
    """Answer 503: the database is unreachable or did not answer; retry as it was."""
    return problem(
        503,
        UNAVAILABLE,
        "Service unavailable",
        MAYBE_WRITTEN if maybe_written else NOT_WRITTEN,
        headers={"Retry-After": str(RETRY_AFTER)},
        outcome="unknown" if maybe_written else "not_done",
    )


def created_response(result: CreateResult, job: JobRecord) -> Response[Any]:
    """Answer ``POST /v1/jobs``: 201 new, 200 replay, 409 key reused with other input."""
    if result.outcome is CreateOutcome.CONFLICT:
        return problem(
            409,
            KEY_REUSED,
            "Idempotency-Key reused",
            "This Idempotency-Key was already used with a different request; "
            "the existing job was not changed.",
            job_id=result.job.id,
        )
    headers = {"Location": job_location(job.id)}
    if result.outcome is CreateOutcome.REPLAYED:
        headers["Idempotent-Replayed"] = "true"
        return Response(content=job_view(job), status_code=200, headers=headers)
    return Response(content=job_view(job), status_code=201, headers=headers)


def job_response(job: JobRecord, *, headers: dict[str, str] | None = None) -> Response[Any]:
    """Answer with a job."""
    return Response(content=job_view(job), status_code=200, headers=headers)


def attempt_response(result: AddAttemptResult, job: JobRecord | None) -> Response[Any]:
    """Answer ``POST /v1/jobs/{id}/attempts``: 202 added, 409 blocked or closed."""
    if result.outcome is AddAttemptOutcome.BLOCKED and result.blocking is not None:
        blocking = result.blocking
        return problem(
            409,
            ATTEMPT_IN_PROGRESS,
            "Attempt in progress",
            f"Attempt {blocking.id} is {blocking.state.value}; a new attempt may start "
            "only when every attempt has finished (resolve unknown ones first).",
            attempt_id=blocking.id,
            attempt_state=blocking.state.value,
        )
    if result.outcome is not AddAttemptOutcome.ADDED or job is None:
        status = job.status.value if job is not None else "closed"
        return problem(
            409, JOB_CLOSED, "Job closed", f"The job is {status}; no attempt may be added."
        )
    attempt_id = result.attempt.id if result.attempt is not None else None
    return Response(
        content={**job_view(job), "attempt_id": attempt_id},
        status_code=202,
        headers={"Location": job_location(job.id)},
    )


def cancel_response(result: TransitionResult) -> Response[Any]:
    """Answer ``POST /v1/jobs/{id}/cancel``: 200 cancelled (also again), 409 already decided."""
    job = result.job
    if result.outcome is TransitionOutcome.DONE and job is not None:
        return job_response(job)
    if job is not None and job.status is JobStatus.CANCELLED:
        return job_response(job)
    status = job.status.value if job is not None else "decided"
    return problem(
        409,
        JOB_CLOSED,
        "Job closed",
        result.detail or f"The job is {status} and can no longer be cancelled.",
        job_id=job.id if job is not None else None,
        job_status=status,
    )


def resolve_response(result: TransitionResult) -> Response[Any]:
    """Answer ``POST /v1/admin/attempts/{id}/resolve``: 200 resolved, 409 not unknown."""
    if result.outcome is TransitionOutcome.DONE:
        attempt = result.attempt
        return Response(
            content={
                "attempt": admin_attempt_view(attempt, result.job) if attempt else None,
                "job": job_view(result.job) if result.job else None,
            },
            status_code=200,
        )
    state = result.attempt.state.value if result.attempt is not None else None
    return problem(
        409,
        NOT_UNKNOWN,
        "Attempt not unknown",
        result.detail or f"Only an unknown attempt can be resolved; this one is {state}.",
        attempt_state=state,
    )
