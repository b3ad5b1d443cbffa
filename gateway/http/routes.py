"""Route handlers: parse the request, call the service, hand the outcome to ``responses``."""

from __future__ import annotations

import logging
import re
import time
from typing import Annotated, Any

from litestar import HttpMethod, Request, Response, Router, get, head, post, route
from litestar.di import NamedDependency, Provide
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, HeaderParameter, QueryParameter
from litestar.response import ServerSentEvent

from gateway.domain.records import CreateOutcome, Principal
from gateway.domain.states import AttemptState, JobStatus
from gateway.http.auth import authenticate, authenticate_admin, request_key
from gateway.http.event_stream import last_event_id, stream_response, wants_stream
from gateway.http.idempotency import HEADER, parse_idempotency_key
from gateway.http.openapi import (
    CURSOR_PATTERN,
    PREFER_DESCRIPTION,
    SECURITY,
    CreateJobOperation,
    answer,
    body_doc,
    problems,
)
from gateway.http.request_bodies import (
    AttemptBody,
    CreateJobBody,
    ResolveBody,
    ResolveSucceeded,
    read_body,
    read_resolution,
)
from gateway.http.responses import (
    NOT_READY,
    RETRY_AFTER,
    attempt_response,
    cancel_response,
    created_response,
    job_response,
    problem,
    resolve_response,
)
from gateway.http.schemas import (
    AddedAttemptView,
    AdminAttempts,
    Certifications,
    Contracts,
    Health,
    JobEvents,
    JobPage,
    JobView,
    Me,
    Providers,
    Readiness,
    Resolved,
)
from gateway.http.views import admin_attempt_view, event_view, job_view
from gateway.http.webhooks import webhook_handlers
from gateway.logging import JOB_ID_SCOPE_KEY, STARTED_SCOPE_KEY
from gateway.service import MAX_WAIT, JobService

log = logging.getLogger("onejob.http")
#: Seconds ``/readyz`` gives the database: it answers within a second, whatever happens.
READY_TIMEOUT = 0.9

#: The authenticated caller, injected by name from ``authenticate``.
Caller = NamedDependency[Principal]
#: Prometheus text exposition; Litestar adds the one ``charset`` of a text type.
METRICS_MEDIA_TYPE = "text/plain; version=0.0.4"
PreferHeader = Annotated[
    str | None,
    HeaderParameter(name="Prefer", description=PREFER_DESCRIPTION),
]
EVENTS = answer(JobEvents, "The audit trail, oldest first")
JOB_REPLAYED = ResponseSpec(
    data_container=JobView,
    generate_examples=False,
    description="A replay: this Idempotency-Key already made this job (Idempotent-Replayed: true)",
)
#: The filters' values, documented; checked by the service after authentication (400).
STATUS_ENUM: dict[str, Any] = {"enum": [s.value for s in JobStatus]}
STATE_ENUM: dict[str, Any] = {"enum": [s.value for s in AttemptState]}


def page_limit(pattern: str, most: int, default: int, what: str) -> Any:
    """Declare a ``limit``: read as plain decimal digits (``pattern``, which says the range
    too, as the service checks: ``1e3``, ``+5``, ``1.0`` are a 400 naming it, not coerced),
    documented as the integer 1..``most`` it is (it read as a string with a regex)."""
    integer = {"one_of": None, "pattern": None, "type": "integer", "minimum": 1, "maximum": most}
    return QueryParameter(
        pattern=pattern,
        description=f"{what} (default {default}).",
        schema_extra={**integer, "default": default},
    )


JOBS_LIMIT = page_limit(r"^(?:[1-9][0-9]?|100)$", 100, 20, "Jobs on a page")
ATTEMPTS_LIMIT = page_limit(r"^(?:[1-9][0-9]{0,2}|1000)$", 1000, 100, "Attempts listed")
#: An Idempotency-Key as stored: 1-255 printable ASCII characters, an sf-string unquoted.
KEY_PATTERN = r"^[ -~]{1,255}$"
KEY_DOC = (
    "The job this Idempotency-Key made for the owner (as the job's `idempotency_key` shows "
    "it: an sf-string without its quotes); the page holds it or nothing. No `cursor`."
)
OWNER_DOC = "Whose jobs: the caller's by default; another owner's needs the admin scope (403)."
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
    # RFC 7240's wait is the time the client gives the whole request: counted from its
    # arrival, not from the job's creation (with 2 s added between gateway and database,
    # a creation taking 4.5 s then a 3 s wait answered after 7.5 s).
    started = request.scope.get("state", {}).get(STARTED_SCOPE_KEY)
    spent = 0.0 if started is None else time.perf_counter() - started
    job = await service.wait_for(job, max(0.0, seconds - spent), fresh=fresh)
    return job, {"Preference-Applied": f"wait={int(seconds)}"}


@post(
    "/jobs",
    status_code=201,
    dependencies=body_doc(CreateJobBody),
    operation_class=CreateJobOperation,
    responses={
        201: answer(JobView, "The job was created"),
        200: JOB_REPLAYED,
        **problems(400, 409, 413, 422),
    },
)
async def create_job(request: Request[Any, Any, Any]) -> Response[Any]:
    """Create a job, or replay the one this Idempotency-Key already made.

    The API key is checked by the statement that creates the job (one round trip fewer
    on PostgreSQL), so it is read after the body: a request refused for its headers or
    body is answered only once the key proved valid, and anyone else gets 401.
    """
    secret = request_key(request)  # a missing or malformed header: 401, nothing read
    service = service_of(request)
    try:
        key = parse_idempotency_key(request.headers.getall(HEADER.lower(), []))
        body = await read_body(request, CreateJobBody)
        sent = request.headers
        new = service.new_job(
            key,
            body.contract,
            body.input,
            body.provider,
            body.deadline_s,
            traceparent=sent.getall("traceparent", ()),
            tracestate=sent.getall("tracestate", ()),
        )
    except Exception:
        await service.require_key(secret)  # a stranger gets 401, not this refusal
        raise
    result = await service.create_job_for_key(secret, new)
    note_job(request, result.job.id)
    if result.outcome is CreateOutcome.CONFLICT:
        return created_response(result, result.job)  # nothing to wait for
    created = result.outcome is CreateOutcome.CREATED
    job, headers = await _maybe_wait(request, service, result.job, fresh=created)
    response = created_response(result, job)
    response.headers.update(headers)
    return response


@get("/jobs/{job_id:str}", responses={200: answer(JobView, "The job"), **problems(400, 404)})
async def get_job(
    request: Request[Any, Any, Any],
    principal: Caller,
    job_id: FromPath[str],
    prefer: PreferHeader = None,
) -> Response[Any]:
    """Return one of the caller's jobs with its attempts."""
    note_job(request, job_id)
    service = service_of(request)
    job, headers = await _maybe_wait(request, service, await service.get_job(principal, job_id))
    return job_response(job, headers=headers or None)


@get("/jobs/{job_id:str}/events", responses={200: EVENTS, **problems(400, 404)})
async def job_events(
    request: Request[Any, Any, Any], principal: Caller, job_id: FromPath[str]
) -> Response[Any] | ServerSentEvent:
    """Return the job's audit trail, oldest first (every transition, replay, refusal, race);
    with ``Accept: text/event-stream``, follow it as it grows, until the job is done."""
    note_job(request, job_id)
    service = service_of(request)
    after = last_event_id(request.headers.get("last-event-id"))
    if wants_stream(request.headers.get("accept")):
        job = await service.get_job(principal, job_id)
        return stream_response(service.follow(job, after))
    events = await service.job_events(principal, job_id, after)
    return Response(content={"job_id": job_id, "events": [event_view(e) for e in events]})


@get("/jobs", responses={200: answer(JobPage, "A page of jobs"), **problems(400, 403)})
async def list_jobs(
    request: Request[Any, Any, Any],
    principal: Caller,
    status: Annotated[str | None, QueryParameter(schema_extra=STATUS_ENUM)] = None,
    limit: Annotated[str | None, JOBS_LIMIT] = None,
    cursor: Annotated[str | None, QueryParameter(pattern=CURSOR_PATTERN)] = None,
    owner: Annotated[
        str | None, QueryParameter(min_length=1, max_length=200, description=OWNER_DOC)
    ] = None,
    idempotency_key: Annotated[
        str | None, QueryParameter(pattern=KEY_PATTERN, description=KEY_DOC)
    ] = None,
) -> Response[Any]:
    """List the caller's jobs (an admin: any owner's), newest first, a page at a time; or
    find the one job an owner's Idempotency-Key made."""
    jobs, next_cursor = await service_of(request).list_jobs(
        principal,
        status=status,
        limit=int(limit or 20),
        cursor=cursor,
        owner=owner,
        idempotency_key=idempotency_key,
    )
    return Response(content={"jobs": [job_view(j) for j in jobs], "next_cursor": next_cursor})


@post(
    "/jobs/{job_id:str}/attempts",
    status_code=202,
    dependencies=body_doc(AttemptBody),
    responses={
        202: answer(AddedAttemptView, "The attempt was added"),
        **problems(400, 404, 409, 413, 422),
    },
)
async def add_attempt(
    request: Request[Any, Any, Any], principal: Caller, job_id: FromPath[str]
) -> Response[Any]:
    """Ask for a manual attempt on a provider (the "fallback button", R4)."""
    note_job(request, job_id)
    body = await read_body(request, AttemptBody)
    service = service_of(request)
    result = await service.request_attempt(principal, job_id, body.provider)
    job = result.job or await service.store.get_job(job_id, principal.owner_id)
    return attempt_response(result, job)


@post(
    "/jobs/{job_id:str}/cancel",
    status_code=200,
    responses={200: answer(JobView, "The job is cancelled"), **problems(400, 404, 409)},
)
async def cancel_job(
    request: Request[Any, Any, Any], principal: Caller, job_id: FromPath[str]
) -> Response[Any]:
    """Cancel the job; attempts in flight will lose."""
    note_job(request, job_id)
    return cancel_response(await service_of(request).cancel(principal, job_id))


@get("/contracts", responses={200: answer(Contracts, "The contracts"), **problems()})
async def list_contracts(request: Request[Any, Any, Any], principal: Caller) -> Response[Any]:
    """List the contracts a client may name, with their routes."""
    return Response(content={"contracts": service_of(request).contracts()})


@get("/attempts", responses={200: answer(AdminAttempts, "The attempts"), **problems(400, 403)})
async def admin_attempts(
    request: Request[Any, Any, Any],
    principal: Caller,
    attempt_state: Annotated[
        str | None, QueryParameter(name="state", schema_extra=STATE_ENUM)
    ] = None,
    limit: Annotated[str | None, ATTEMPTS_LIMIT] = None,
) -> Response[Any]:
    """List attempts in a state, all owners (admin)."""
    service = service_of(request)
    attempts = await service.list_attempts(principal, attempt_state, limit=int(limit or 100))
    jobs = {a.job_id: await service.store.get_job(a.job_id) for a in attempts}  # owner, contract
    views = [admin_attempt_view(a, jobs[a.job_id]) for a in attempts]
    return Response(content={"attempts": views})


@get("/jobs", responses={200: answer(JobPage, "A page of jobs"), **problems(400, 403)})
async def admin_jobs(
    request: Request[Any, Any, Any],
    principal: Caller,
    status: Annotated[str | None, QueryParameter(schema_extra=STATUS_ENUM)] = None,
    limit: Annotated[str | None, JOBS_LIMIT] = None,
    cursor: Annotated[str | None, QueryParameter(pattern=CURSOR_PATTERN)] = None,
) -> Response[Any]:
    """List every owner's jobs, newest first, a page at a time (admin)."""
    jobs, next_cursor = await service_of(request).list_all_jobs(
        principal, status=status, limit=int(limit or 20), cursor=cursor
    )
    return Response(content={"jobs": [job_view(j) for j in jobs], "next_cursor": next_cursor})


@get(
    "/jobs/{job_id:str}",
    responses={200: answer(JobView, "The job"), **problems(400, 403, 404)},
)
async def admin_job(
    request: Request[Any, Any, Any], principal: Caller, job_id: FromPath[str]
) -> Response[Any]:
    """Return any owner's job with its attempts (admin)."""
    note_job(request, job_id)
    return job_response(await service_of(request).get_any_job(principal, job_id))


@get("/jobs/{job_id:str}/events", responses={200: EVENTS, **problems(400, 403, 404)})
async def admin_job_events(
    request: Request[Any, Any, Any], principal: Caller, job_id: FromPath[str]
) -> Response[Any]:
    """Return any owner's job's audit trail, oldest first (admin)."""
    note_job(request, job_id)
    service = service_of(request)
    job = await service.get_any_job(principal, job_id)
    events = await service.store.events(job.id, owner_id=job.owner_id)
    return Response(content={"job_id": job.id, "events": [event_view(e) for e in events]})


@post(
    "/attempts/{attempt_id:str}/resolve",
    status_code=200,
    dependencies=body_doc(ResolveBody),
    responses={
        200: answer(Resolved, "The attempt was resolved"),
        **problems(400, 403, 404, 409, 413, 422),
    },
)
async def admin_resolve(
    request: Request[Any, Any, Any], principal: Caller, attempt_id: FromPath[str]
) -> Response[Any]:
    """Resolve an unknown attempt out of band (admin)."""
    service = service_of(request)
    body = await read_resolution(request)
    outcome = str(type(body).__struct_config__.tag)
    result_value = body.result if isinstance(body, ResolveSucceeded) else None
    result = await service.resolve(principal, attempt_id, outcome, result_value, body.note)
    if result.job is not None:
        note_job(request, result.job.id)
    return resolve_response(result)


@get("/me", responses={200: answer(Me, "The caller"), **problems()})
async def who_am_i(principal: Caller) -> Response[Any]:
    """Say whose key this is and what it may do (the console asks before showing admin views)."""
    return Response(content={"owner": principal.owner_id, "scopes": sorted(principal.scopes)})


@get(
    "/certifications",
    responses={200: answer(Certifications, "The failover matrix"), **problems()},
)
async def list_certifications(request: Request[Any, Any, Any], principal: Caller) -> Response[Any]:
    """Show the effective failover matrix: which fallback may replace which primary."""
    return Response(content={"certifications": await service_of(request).certifications_view()})


@get(
    "/providers",
    responses={200: answer(Providers, "The configured providers and their capacity"), **problems()},
)
async def list_providers(request: Request[Any, Any, Any], principal: Caller) -> Response[Any]:
    """Show each configured provider's capacity as this gateway sees it: its circuit, a pause
    it asked for, the pace kept to, calls in flight, and the queue's attempts for it."""
    return Response(content={"providers": service_of(request).providers_view()})


@get("/metrics", media_type=METRICS_MEDIA_TYPE)
async def metrics_endpoint(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Expose Prometheus metrics."""
    body, _ = await service_of(request).render_metrics()
    return Response(content=body, media_type=METRICS_MEDIA_TYPE)


@get("/healthz", responses={200: answer(Health, "Alive: ok")})
async def healthz() -> Response[Any]:
    """Say the process is alive."""
    return Response(content={"status": "ok"})


@head("/healthz")
async def healthz_head() -> None:
    """Say the process is alive, without a body (load balancers' HEAD probes)."""


@get("/readyz", responses={200: answer(Readiness, "Ready"), 503: problems()[503]})
async def readyz(request: Request[Any, Any, Any]) -> Response[Any]:
    """Say whether the database answers."""
    store = service_of(request).store
    try:
        await store.ping(READY_TIMEOUT)
    except Exception as exc:  # any failure means "not ready", never a 500
        # The reason goes to the log only, once per outage: this route is unauthenticated.
        if not store.unavailable(exc, "readiness"):
            log.warning("readiness check failed: %s", type(exc).__name__, exc_info=exc)
        return problem(
            503,
            NOT_READY,
            "Not ready",
            "The database is not reachable.",
            headers={"Retry-After": str(RETRY_AFTER)},
        )
    hub = service_of(request).hub
    relay = hub.relay if hub is not None else None
    listen = None if relay is None else ("connected" if relay.connected else "down")
    providers = service_of(request).circuits()
    return Response(content={"status": "ready", "listen": listen, "providers": providers})


def allow(path: str, *handlers: HTTPRouteHandler) -> HTTPRouteHandler:
    """Answer ``OPTIONS path`` with every method of ``handlers`` in ``Allow``.

    Litestar makes an OPTIONS handler when a path's first handler is registered and keeps
    it when a second joins, so ``OPTIONS /v1/jobs`` would leave POST or GET out. A path
    with several handlers gets this one instead, registered before them.
    """
    methods = ", ".join(sorted({m for h in handlers for m in h.http_methods} | {"OPTIONS"}))

    @route(path, http_method=[HttpMethod.OPTIONS], include_in_schema=False)
    async def options() -> Response[None]:
        return Response(None, status_code=204, headers={"Allow": methods})

    return options


def v1_router() -> Router:
    """Build the ``/v1`` routes; every one needs a bearer key."""
    return Router(
        path="/v1",
        route_handlers=[
            allow("/jobs", create_job, list_jobs),  # before them: see ``allow``
            create_job,
            job_events,
            get_job,
            list_jobs,
            who_am_i,
            add_attempt,
            cancel_job,
            list_contracts,
            list_certifications,
            list_providers,
            *webhook_handlers(allow),
            admin_router(),
        ],
        dependencies={"principal": Provide(authenticate)},
        security=SECURITY,
    )


def admin_router() -> Router:
    """Build the ``/v1/admin`` routes: the admin scope is checked before the request is read."""
    return Router(
        path="/admin",
        route_handlers=[admin_attempts, admin_jobs, admin_job_events, admin_job, admin_resolve],
        dependencies={"principal": Provide(authenticate_admin)},
    )
