"""Rows to records and back: timestamps, cursors, key hashes (no I/O)."""

from __future__ import annotations

import base64
import datetime as dt
import enum
import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from gateway.domain.records import (
    AttemptRecord,
    JobRecord,
)
from gateway.domain.states import AttemptReason, AttemptState, JobStatus

log = logging.getLogger("onejob.store")

A = AttemptState
E = TypeVar("E", bound=enum.Enum)
DECIDED = (JobStatus.SUCCEEDED.value, JobStatus.CANCELLED.value)
MAX_LIST_LIMIT = 100


#: The epoch, aware and naive. A stored time is naive UTC; moving one between the two
#: forms by its distance from the epoch is exact to the microsecond, and faster than
#: ``replace(tzinfo=...)`` or ``astimezone`` on CPython 3.11 (to aware 0.23 against 2.2 us,
#: to naive 0.73 against 2.1, on the benchmark host): a claimed creation's records alone
#: convert six times (docs/benchmarks.md, seventeenth session).
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_NAIVE_EPOCH = dt.datetime(1970, 1, 1)


def naive_utc(value: dt.datetime) -> dt.datetime:
    """Return ``value`` as naive UTC (a naive ``value`` is local time, as ``astimezone``
    reads it)."""
    if value.utcoffset() is None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    return _NAIVE_EPOCH + (value - _EPOCH)


def aware_utc(value: dt.datetime | None) -> dt.datetime | None:
    """Return a stored (naive UTC) time as aware UTC; an aware one gets UTC as its zone."""
    if value is None:
        return None
    if value.tzinfo is None:
        return _EPOCH + (value - _NAIVE_EPOCH)
    return value.replace(tzinfo=dt.UTC)


def _members(kind: type[E]) -> Callable[[Any], E]:
    """Return ``kind``'s lookup by value: a dict's, ~20x faster than calling the enum; a
    value that is not a member's still raises the enum's ``ValueError``."""
    members = {m.value: m for m in kind}

    def member(value: Any) -> E:
        found = members.get(value)
        return found if found is not None else kind(value)

    return member


attempt_reason = _members(AttemptReason)
attempt_state = _members(AttemptState)
job_status = _members(JobStatus)


def attempt_record(row: Any) -> AttemptRecord:
    return AttemptRecord(
        id=row.id,
        job_id=row.job_id,
        number=row.number,
        provider=row.provider,
        reason=attempt_reason(row.reason),
        state=attempt_state(row.state),
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
    return job_with(row, tuple(attempt_record(a) for a in attempt_rows))


def job_with(row: Any, attempts: tuple[AttemptRecord, ...]) -> JobRecord:
    """The job of ``row`` with ``attempts``, records already."""
    return JobRecord(
        id=row.id,
        owner_id=row.owner_id,
        idempotency_key=row.idempotency_key,
        fingerprint=row.fingerprint,
        contract=row.contract,
        provider=row.provider,
        requested_provider=row.requested_provider,
        input=row.input,
        status=job_status(row.status),
        version=row.version,
        completed_by=row.completed_by,
        result=row.result,
        error=row.error,
        created_at=aware_utc(row.created_at),  # type: ignore[arg-type]
        updated_at=aware_utc(row.updated_at),  # type: ignore[arg-type]
        attempts=attempts,
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
