"""Route handlers: parse the request, call the service, hand the outcome to ``responses``."""

from __future__ import annotations

import logging
import re
from typing import Annotated, Any

from litestar import Request, Response, Router, get, post
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath, FromQuery, QueryParameter

from gateway.domain.records import CreateOutcome, Principal
from gateway.http.auth import authenticate
from gateway.http.body import read_json
from gateway.http.idempotency import HEADER, parse_idempotency_key
from gateway.http.responses import (
    NOT_READY,
    attempt_response,
    cancel_response,
    created_response,
    job_response,
    problem,
    resolve_response,
)
from gateway.http.views import admin_attempt_view, event_view, job_view
from gateway.logging import JOB_ID_SCOPE_KEY
from gateway.service import MAX_WAIT, JobService

log = logging.getLogger("onejob.http")

#: The authenticated caller, injected by name from ``authenticate``.
Caller = NamedDependency[Principal]
_WAIT = re.compile(r"^\s*wait\s*=\s*\"?(\d{1,6})\"?\s*$", re.IGNORECASE)


def service_of(request: Request[Any, Any, Any]) -> JobService:
    """Return the app's service (built in the lifespan)."""
    service: JobService = request.app.state.service
    return service


def note_job(request: Request[Any, Any, Any], job_id: str) -> None:
    """Remember the job a request concerns, for the access log."""
    request.scope.setdefault("state", {})[JOB_ID_SCOPE_KEY] = job_id


def preferred_wait(request: Request[Any, Any, Any]) -> float | None:
    """Return the ``Prefer: wait=N`` seconds (RFC 7240), capped at ``MAX_WAIT``, if asked."""
    for header in request.headers.getall("prefer", []):
        for pref in header.split(","):
            match = _WAIT.match(pref.split(";", 1)[0])
            if match:
                return min(float(match.group(1)), MAX_WAIT)
    return None


async def _maybe_wait(
    request: Request[Any, Any, Any], service: JobService, job: Any, *, fresh: bool = False
) -> tuple[Any, dict[str, str]]:
    seconds = preferred_wait(request)
    if seconds is None:
        return job, {}
    job = await service.wait_for(job, seconds, fresh=fresh)
    return job, {"Preference-Applied": f"wait={int(seconds)}"}


@post("/jobs")
async def create_job(request: Request[Any, Any, Any], principal: Caller) -> Response[Any]:
    """Create a job, or replay the one this Idempotency-Key already made."""
    key = parse_idempotency_key(request.headers.getall(HEADER.lower(), []))
    body = await read_json(request)
    service = service_of(request)
    result = await service.create_job(principal, key, body)
    note_job(request, result.job.id)
    if result.outcome is CreateOutcome.CONFLICT:
        return created_response(result, result.job)  # nothing to wait for
    created = result.outcome is CreateOutcome.CREATED
    job, headers = await _maybe_wait(request, service, result.job, fresh=created)
    response = created_response(result, job)
    response.headers.update(headers)
    return response


@get("/jobs/{job_id:str}")
async def get_job(
    request: Request[Any, Any, Any], principal: Caller, job_id: FromPath[str]
) -> Response[Any]:
    """Return one of the caller's jobs with its attempts."""
    note_job(request, job_id)
    service = service_of(request)
    job, headers = await _maybe_wait(request, service, await service.get_job(principal, job_id))
    return job_response(job, headers=headers or None)


@get("/jobs/{job_id:str}/events")
async def job_events(
    request: Request[Any, Any, Any], principal: Caller, job_id: FromPath[str]
) -> Response[Any]:
    """Return the job's audit trail, oldest first (every transition, replay, refusal, race)."""
    note_job(request, job_id)
    events = await service_of(request).job_events(principal, job_id)
    return Response(content={"job_id": job_id, "events": [event_view(e) for e in events]})


@get("/jobs")
async def list_jobs(
    request: Request[Any, Any, Any],
    principal: Caller,
    status: FromQuery[str | None] = None,
    limit: FromQuery[int] = 20,
    cursor: FromQuery[str | None] = None,
) -> Response[Any]:
    """List the caller's jobs, newest first, a page at a time."""
    jobs, next_cursor = await service_of(request).list_jobs(
        principal, status=status, limit=limit, cursor=cursor
    )
    return Response(content={"jobs": [job_view(j) for j in jobs], "next_cursor": next_cursor})


@post("/jobs/{job_id:str}/attempts")
async def add_attempt(
    request: Request[Any, Any, Any], principal: Caller, job_id: FromPath[str]
) -> Response[Any]:
    """Ask for a manual attempt on a provider (the "fallback button", R4)."""
    note_job(request, job_id)
    body = await read_json(request)
    service = service_of(request)
    provider = body.get("provider") if isinstance(body, dict) else None
    result = await service.request_attempt(principal, job_id, provider)
    job = result.job or await service.store.get_job(job_id, principal.owner_id)
    return attempt_response(result, job)


@post("/jobs/{job_id:str}/cancel")
async def cancel_job(
    request: Request[Any, Any, Any], principal: Caller, job_id: FromPath[str]
) -> Response[Any]:
    """Cancel the job; attempts in flight will lose."""
    note_job(request, job_id)
    return cancel_response(await service_of(request).cancel(principal, job_id))


@get("/contracts")
async def list_contracts(request: Request[Any, Any, Any], principal: Caller) -> Response[Any]:
    """List the contracts a client may name, with their routes."""
    return Response(content={"contracts": service_of(request).contracts()})


@get("/admin/attempts")
async def admin_attempts(
    request: Request[Any, Any, Any],
    principal: Caller,
    attempt_state: Annotated[str | None, QueryParameter(name="state")] = None,
    limit: FromQuery[int] = 100,
) -> Response[Any]:
    """List attempts in a state, all owners (admin)."""
    service = service_of(request)
    attempts = await service.list_attempts(principal, attempt_state, limit=limit)
    jobs = {a.job_id: await service.store.get_job(a.job_id) for a in attempts}  # owner, contract
    views = [admin_attempt_view(a, jobs[a.job_id]) for a in attempts]
    return Response(content={"attempts": views})


@get("/admin/jobs/{job_id:str}")
async def admin_job(
    request: Request[Any, Any, Any], principal: Caller, job_id: FromPath[str]
) -> Response[Any]:
    """Return any owner's job with its attempts (admin)."""
    note_job(request, job_id)
    return job_response(await service_of(request).get_any_job(principal, job_id))


@get("/admin/jobs/{job_id:str}/events")
async def admin_job_events(
    request: Request[Any, Any, Any], principal: Caller, job_id: FromPath[str]
) -> Response[Any]:
    """Return any owner's job's audit trail, oldest first (admin)."""
    note_job(request, job_id)
    service = service_of(request)
    job = await service.get_any_job(principal, job_id)
    events = await service.store.events(job.id)
    return Response(content={"job_id": job.id, "events": [event_view(e) for e in events]})


@post("/admin/attempts/{attempt_id:str}/resolve")
async def admin_resolve(
    request: Request[Any, Any, Any], principal: Caller, attempt_id: FromPath[str]
) -> Response[Any]:
    """Resolve an unknown attempt out of band (admin)."""
    service = service_of(request)
    service.require_admin(principal)  # before reading the body: no hints for non-admins
    body = await read_json(request)
    if not isinstance(body, dict):
        body = {"outcome": None}
    result = await service.resolve(
        principal, attempt_id, body.get("outcome"), body.get("result"), body.get("note", "")
    )
    if result.job is not None:
        note_job(request, result.job.id)
    return resolve_response(result)


@get("/me")
async def who_am_i(principal: Caller) -> Response[Any]:
    """Say whose key this is and what it may do (the console asks before showing admin views)."""
    return Response(content={"owner": principal.owner_id, "scopes": sorted(principal.scopes)})


@get("/certifications")
async def list_certifications(request: Request[Any, Any, Any], principal: Caller) -> Response[Any]:
    """Show the effective failover matrix: which fallback may replace which primary."""
    return Response(content={"certifications": service_of(request).certifications_matrix()})


@get("/metrics")
async def metrics_endpoint(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Expose Prometheus metrics."""
    body, content_type = await service_of(request).render_metrics()
    return Response(content=body, media_type=content_type)


@get("/healthz")
async def healthz() -> Response[Any]:
    """Say the process is alive."""
    return Response(content={"status": "ok"})


@get("/readyz")
async def readyz(request: Request[Any, Any, Any]) -> Response[Any]:
    """Say whether the database answers."""
    try:
        await service_of(request).store.ping()
    except Exception as exc:  # any failure means "not ready", never a 500
        # The reason goes to the log only: this route is unauthenticated.
        log.warning("readiness check failed: %s", type(exc).__name__, exc_info=exc)
        return problem(503, NOT_READY, "Not ready", "The database is not reachable.")
    return Response(content={"status": "ready"})


def v1_router() -> Router:
    """Build the ``/v1`` routes; every one needs a bearer key."""
    return Router(
        path="/v1",
        route_handlers=[
            create_job,
            job_events,
            get_job,
            list_jobs,
            who_am_i,
            add_attempt,
            cancel_job,
            list_contracts,
            list_certifications,
            admin_attempts,
            admin_job_events,
            admin_job,
            admin_resolve,
        ],
        dependencies={"principal": Provide(authenticate)},
    )
