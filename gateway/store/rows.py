"""Rows to records and back: timestamps, cursors, key hashes (no I/O)."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import logging
from collections.abc import Sequence
from typing import Any

from gateway.domain.records import (
    AttemptRecord,
    JobRecord,
)
from gateway.domain.states import AttemptReason, AttemptState, JobStatus

log = logging.getLogger("onejob.store")

A = AttemptState
DECIDED = (JobStatus.SUCCEEDED.value, JobStatus.CANCELLED.value)
MAX_LIST_LIMIT = 100


def naive_utc(value: dt.datetime) -> dt.datetime:
    return value.astimezone(dt.UTC).replace(tzinfo=None)


def aware_utc(value: dt.datetime | None) -> dt.datetime | None:
    return None if value is None else value.replace(tzinfo=dt.UTC)


def attempt_record(row: Any) -> AttemptRecord:
    return AttemptRecord(
        id=row.id,
        job_id=row.job_id,
        number=row.number,
        provider=row.provider,
        reason=AttemptReason(row.reason),
        state=AttemptState(row.state),
        read_version=row.read_version,
        lease_owner=row.lease_owner,
        lease_expires_at=aware_utc(row.lease_expires_at),
        deadline_at=aware_utc(row.deadline_at),
        downstream_key=row.downstream_key,
        provider_request_id=row.provider_request_id,
        error=row.error,
        created_at=aware_utc(row.created_at),  # type: ignore[arg-type]
        started_at=aware_utc(row.started_at),
        finished_at=aware_utc(row.finished_at),
        reconciler=row.reconciler,
        reported_model=row.reported_model,
    )


def job_record(row: Any, attempt_rows: Sequence[Any] = ()) -> JobRecord:
    return JobRecord(
        id=row.id,
        owner_id=row.owner_id,
        idempotency_key=row.idempotency_key,
        fingerprint=row.fingerprint,
        contract=row.contract,
        provider=row.provider,
        requested_provider=row.requested_provider,
        input=row.input,
        status=JobStatus(row.status),
        version=row.version,
        completed_by=row.completed_by,
        result=row.result,
        error=row.error,
        created_at=aware_utc(row.created_at),  # type: ignore[arg-type]
        updated_at=aware_utc(row.updated_at),  # type: ignore[arg-type]
        attempts=tuple(attempt_record(a) for a in attempt_rows),
    )


def hash_key(secret: str) -> str:
    """Return the sha256 hex under which an API key is stored."""
    return hashlib.sha256(secret.encode()).hexdigest()


def encode_cursor(job_id: str) -> str:
    """Make an opaque paging cursor."""
    return base64.urlsafe_b64encode(job_id.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    """Read a paging cursor; raise ValueError when it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError("invalid cursor") from exc
    if not raw.startswith("job_") or not raw.isprintable() or len(raw) > 40:
        raise ValueError("invalid cursor")
    return raw
