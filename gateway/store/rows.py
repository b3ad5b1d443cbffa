"""Rows to records and back, whatever brought them: SQLAlchemy rows, mappings by column
(asyncpg records, SQLAlchemy ``RowMapping``), SQLite tuples read with SQLAlchemy's own
column processors (``Codec``); JSON parameters as text; timestamps, cursors, key hashes.
No I/O."""

from __future__ import annotations

import base64
import datetime as dt
import enum
import hashlib
import json
import logging
import types
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import msgspec
import sqlalchemy as sa

from gateway.domain.records import (
    AttemptRecord,
    JobRecord,
)
from gateway.domain.states import UNSENT_STATES, AttemptReason, AttemptState, JobStatus
from gateway.store.tables import attempts, job_events, jobs

log = logging.getLogger("onejob.store")

A = AttemptState
E = TypeVar("E", bound=enum.Enum)
DECIDED = (JobStatus.SUCCEEDED.value, JobStatus.CANCELLED.value)
#: Unsent attempts' states (``states.UNSENT_STATES``), as stored (SQL: ``tables.UNSENT_SQL``).
UNSENT = tuple(s.value for s in UNSENT_STATES)
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
        ready_at=aware_utc(row.ready_at),
        waits=row.waits or 0,
        owner_id=row.owner_id,
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
        deadline_at=aware_utc(row.deadline_at),
        traceparent=row.traceparent,
        tracestate=row.tracestate,
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


# -- mappings by column (asyncpg records, SQLAlchemy RowMapping) ------------------------------

JOB_COLUMNS = [c.name for c in jobs.c]
ATTEMPT_COLUMNS = [c.name for c in attempts.c]
#: An event's columns, in the order of the multi-row statements (``events``).
EVENT_COLUMNS = ("job_id", "attempt_id", "kind", "detail", "at", "owner_id")


def prefixed(alias: str, prefix: str, columns: Sequence[str]) -> str:
    """``alias.column AS <prefix>column, ...``: a job's and an attempt's columns in one row."""
    return ", ".join(f"{alias}.{c} AS {prefix}{c}" for c in columns)


#: Each column's name, and its name in a record with its table's prefix (``_select``):
#: spelled once, not per column of every row read.
_JOB_NAMES = tuple((c, f"j_{c}") for c in JOB_COLUMNS)
_ATTEMPT_NAMES = tuple((c, f"a_{c}") for c in ATTEMPT_COLUMNS)


def as_row(record: Any, names: Sequence[tuple[str, str]]) -> types.SimpleNamespace | None:
    """Read the prefixed columns ``names`` (column, name in ``record``) of an asyncpg
    record as a row (None when its ``id`` is NULL: a job without that attempt)."""
    values = {column: record[name] for column, name in names}
    if values["id"] is None:
        return None
    return types.SimpleNamespace(**values)


def job_of(records: Sequence[Any]) -> JobRecord:
    """Read a job from a row per attempt, its columns repeated (``j_``, ``a_`` prefixes)."""
    job_row = as_row(records[0], _JOB_NAMES)
    rows = [as_row(r, _ATTEMPT_NAMES) for r in records]
    return job_record(job_row, [r for r in rows if r is not None])


def as_json(value: Any) -> str:
    """Encode a JSON parameter as text, as the jsonb codec on the connection expects.

    NaN and the infinities are refused (``ValueError``), as JSON has none: a provider's
    result is checked here.
    """
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def as_checked_json(value: Any) -> str:
    """Encode a value already known to be storable JSON as text: a request's parsed input
    (``gateway.http.strict_json`` refused NaN, the infinities and unpaired surrogates) or a
    scrubbed event detail.

    msgspec writes the same JSON value as ``as_json`` (jsonb keeps values, not text)
    at a twelfth of its cost; a creation encodes three (its input and two events). It
    would write a NaN as ``null`` where ``as_json`` refuses it, so a provider's result
    goes through ``as_json``.
    """
    return _encode_json(value).decode()


_encode_json = msgspec.json.Encoder().encode


# -- SQLite tuples ------------------------------------------------------------------------------


Processor = Callable[[Any], Any] | None


class Codec:
    """SQLAlchemy's own bind and result processors for the tables' columns on SQLite."""

    def __init__(self, dialect: sa.Dialect) -> None:
        def binds(table: sa.Table) -> dict[str, Processor]:
            return {c.name: c.type.dialect_impl(dialect).bind_processor(dialect) for c in table.c}

        def results(table: sa.Table) -> list[Processor]:
            return [c.type.dialect_impl(dialect).result_processor(dialect, None) for c in table.c]

        self._bind = {"jobs": binds(jobs), "attempts": binds(attempts), "events": binds(job_events)}
        self._job_results = results(jobs)
        self._attempt_results = results(attempts)

    def bind(self, table: str, column: str, value: Any) -> Any:
        """One value as SQLAlchemy would send it for ``table.column`` (``None`` too: a
        JSON column stores it as JSON ``null``, as Core does)."""
        proc = self._bind[table][column]
        return value if proc is None else proc(value)

    def params(self, table: str, values: dict[str, Any], columns: Sequence[str]) -> list[Any]:
        """The positional parameters of ``columns`` from ``values``: an absent column is
        SQL NULL (Core leaves it out of the INSERT), a present one goes through ``bind``."""
        return [self.bind(table, c, values[c]) if c in values else None for c in columns]

    def event_params(self, rows: Sequence[tuple[str, str | None, str, Any, Any, str]]) -> list[Any]:
        """Parameters of ``insert_events_sql(len(rows))``: ``(job_id, attempt_id, kind,
        detail, at, owner_id)`` each."""
        out: list[Any] = []
        for row in rows:
            out.extend(
                self.params("events", dict(zip(EVENT_COLUMNS, row, strict=True)), EVENT_COLUMNS)
            )
        return out

    def job_row(self, raw: Sequence[Any]) -> types.SimpleNamespace:
        return _row(raw, JOB_COLUMNS, self._job_results)

    def attempt_row(self, raw: Sequence[Any]) -> types.SimpleNamespace:
        return _row(raw, ATTEMPT_COLUMNS, self._attempt_results)

    def job_with_attempts(
        self, raws: Sequence[Sequence[Any]]
    ) -> tuple[types.SimpleNamespace, list[types.SimpleNamespace]]:
        """Read rows of a job's columns then an attempt's (at least one row; an attempt's
        NULL id: none): the job and its attempts."""
        n = len(JOB_COLUMNS)
        tried = [self.attempt_row(raw[n:]) for raw in raws if raw[n] is not None]
        return self.job_row(raws[0][:n]), tried


def _row(
    raw: Sequence[Any], names: Sequence[str], procs: Sequence[Processor]
) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        **{
            name: value if proc is None or value is None else proc(value)
            for name, value, proc in zip(names, raw, procs, strict=True)
        }
    )
