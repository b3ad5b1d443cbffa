"""The JSON shapes of DESIGN §4: jobs, attempts, pages."""

from __future__ import annotations

import datetime as dt
from typing import Any

from gateway.domain.records import AttemptRecord, EventRecord, JobRecord
from gateway.domain.states import AttemptState


def timestamp(value: dt.datetime | None) -> str | None:
    """Render a stored time as RFC 3339 UTC (``...Z``); naive values are UTC."""
    if value is None:
        return None
    if value.tzinfo is dt.UTC:  # the records' own (aware_utc): "+00:00" becomes "Z"
        return value.isoformat(timespec="milliseconds")[:-6] + "Z"
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value.isoformat(timespec="milliseconds") + "Z"


def attempt_view(attempt: AttemptRecord) -> dict[str, Any]:
    """Describe one attempt to its job's owner."""
    return {
        "id": attempt.id,
        "number": attempt.number,
        "provider": attempt.provider,
        "reason": attempt.reason.value,
        "state": attempt.state.value,
        "error": attempt.error,
        "started_at": timestamp(attempt.started_at),
        "finished_at": timestamp(attempt.finished_at),
        "ready_at": (
            timestamp(attempt.ready_at) if attempt.state is AttemptState.WAITING else None
        ),
        "waits": attempt.waits,
    }


def waiting_view(job: JobRecord) -> dict[str, Any] | None:
    """Say why a job waits for capacity and until when (None: it does not)."""
    for attempt in job.attempts:
        if attempt.state is AttemptState.WAITING:
            error = attempt.error or {}
            return {
                "attempt_id": attempt.id,
                "provider": attempt.provider,
                "reason": str(error.get("capacity") or error.get("reason") or "not_now"),
                "until": timestamp(attempt.ready_at),
                "waits": attempt.waits,
            }
    return None


def admin_attempt_view(attempt: AttemptRecord, job: JobRecord | None = None) -> dict[str, Any]:
    """Describe one attempt to an admin: with its job, owner and timing details."""
    return {
        **attempt_view(attempt),
        "job_id": attempt.job_id,
        "owner": job.owner_id if job is not None else None,
        "contract": job.contract if job is not None else None,
        "downstream_key": attempt.downstream_key,
        "provider_request_id": attempt.provider_request_id,
        "reported_model": attempt.reported_model,
        "lease_owner": attempt.lease_owner,
        "deadline_at": timestamp(attempt.deadline_at),
        "created_at": timestamp(attempt.created_at),
        "reconciler": reconciler_view(attempt.reconciler),
    }


#: What the admin list shows of the reconciler's last finding (the audit event has it all).
RECONCILER_FIELDS = ("last_checked_at", "finding", "completion_id", "message")


def reconciler_view(finding: dict[str, Any] | None) -> dict[str, Any] | None:
    """Describe what the reconciler last found (None: it never asked)."""
    if finding is None:
        return None
    return {k: finding[k] for k in RECONCILER_FIELDS if finding.get(k) is not None}


def job_view(job: JobRecord) -> dict[str, Any]:
    """Describe a job with its attempts."""
    return {
        "id": job.id,
        "owner": job.owner_id,
        "idempotency_key": job.idempotency_key,
        "contract": job.contract,
        "provider": job.provider,
        "status": job.status.value,
        "version": job.version,
        "completed_by": job.completed_by,
        "result": job.result,
        "error": job.error,
        "created_at": timestamp(job.created_at),
        "updated_at": timestamp(job.updated_at),
        "deadline_at": timestamp(job.deadline_at),
        "waiting": waiting_view(job),
        "trace": trace_view(job),
        "attempts": [attempt_view(a) for a in job.attempts],
    }


def trace_view(job: JobRecord) -> dict[str, Any] | None:
    """The trace context a job keeps (None: none)."""
    parent = job.traceparent
    if parent is None:
        return None
    return {"traceparent": parent, "trace_id": parent[3:35], "tracestate": job.tracestate}


def job_location(job_id: str) -> str:
    """Return the path of a job."""
    return f"/v1/jobs/{job_id}"


def event_view(event: EventRecord) -> dict[str, Any]:
    """Render one audit event."""
    return {
        "id": event.id,
        "kind": event.kind,
        "attempt_id": event.attempt_id,
        "detail": event.detail,
        "at": timestamp(event.at),
    }
