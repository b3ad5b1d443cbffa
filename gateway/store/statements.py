"""The statements the hot path reuses, built once, and the derived job status."""

from __future__ import annotations

import functools
import logging
from typing import Any

import sqlalchemy as sa

from gateway.domain.states import AttemptState, JobStatus
from gateway.store.rows import A
from gateway.store.tables import api_keys, attempts, job_events, jobs

log = logging.getLogger("onejob.store")


def derived_status() -> sa.ColumnElement[str]:
    """Return SQL that recomputes a job's status from its attempts (R3)."""

    def has(state: AttemptState) -> sa.Exists:
        return (
            sa.select(attempts.c.id)
            .where(attempts.c.job_id == jobs.c.id, attempts.c.state == state.value)
            .exists()
        )

    return sa.case(
        (has(A.UNKNOWN), JobStatus.UNKNOWN.value),
        (has(A.RUNNING), JobStatus.RUNNING.value),
        (has(A.STARTING), JobStatus.QUEUED.value),
        (jobs.c.completed_by.is_not(None), JobStatus.SUCCEEDED.value),
        else_=JobStatus.FAILED.value,
    )


# Hot statements are built once: a statement object that is reused keeps its cache key,
# so SQLAlchemy neither rebuilds nor recompiles it per call (that was most of its cost).
ATTEMPT_ROWS = (
    sa.select(attempts)
    .where(attempts.c.job_id == sa.bindparam("job_id"))
    .order_by(attempts.c.number)
)
ATTEMPT_ROW = sa.select(attempts).where(attempts.c.id == sa.bindparam("attempt_id"))
INSERT_EVENTS = job_events.insert()
RUNNING_ATTEMPT = sa.select(attempts.c.job_id, attempts.c.read_version).where(
    attempts.c.id == sa.bindparam("attempt_id"), attempts.c.state == AttemptState.RUNNING.value
)
FINISH_RUNNING = (
    attempts.update()
    .where(
        attempts.c.id == sa.bindparam("attempt_id"),
        attempts.c.state == AttemptState.RUNNING.value,
    )
    .values(
        state=sa.bindparam("target"),
        finished_at=sa.bindparam("finished_at"),
        provider_request_id=sa.bindparam("provider_request_id"),
        reported_model=sa.bindparam("reported_model"),
    )
    .returning(*attempts.c)
)


@functools.lru_cache(maxsize=8)
def insert_events_statement(rows: int) -> Any:
    """Return one multi-row INSERT of ``rows`` audit events (parameters ``<column>_<n>``).

    Written as ``text`` with typed binds, not ``insert().values([...])``: SQLAlchemy gives a
    multi-row VALUES construct no cache key, so it was compiled again on every execution
    (py-spy: the compiler at 5 % of a SQLite creation). A ``text`` statement is cached.
    """
    columns = ("job_id", "attempt_id", "kind", "detail", "at")
    values = ", ".join("(" + ", ".join(f":{c}_{n}" for c in columns) + ")" for n in range(rows))
    sql = f"INSERT INTO {job_events.name} ({', '.join(columns)}) VALUES {values}"
    return sa.text(sql).bindparams(
        *(
            sa.bindparam(f"{c}_{n}", type_=job_events.c[c].type)
            for n in range(rows)
            for c in columns
        )
    )


AUTHENTICATE = sa.select(api_keys.c.id, api_keys.c.owner_id, api_keys.c.scopes).where(
    api_keys.c.key_hash == sa.bindparam("key_hash"), api_keys.c.revoked_at.is_(None)
)

#: R5's compare-and-swap for a running attempt, as SQLite runs it (PostgreSQL runs
#: ``pg_round_trips.FINALIZE_ALONE``): ``UPDATE jobs ... WHERE id = :job AND version =
#: :read_version AND completed_by IS NULL``, where job and read_version are the attempt's
#: own (subqueries on the attempt, which must still be ``running``): no read before it,
#: and the job's row is the first thing the transaction writes, as in every transition.
CAS_RUNNING = (
    jobs.update()
    .where(
        jobs.c.id == RUNNING_ATTEMPT.with_only_columns(attempts.c.job_id).scalar_subquery(),
        jobs.c.version
        == RUNNING_ATTEMPT.with_only_columns(attempts.c.read_version).scalar_subquery(),
        jobs.c.completed_by.is_(None),
    )
    .values(
        status=JobStatus.SUCCEEDED.value,
        result=sa.bindparam("result", type_=jobs.c.result.type),
        error=sa.null(),
        completed_by=sa.bindparam("attempt_id"),
        version=jobs.c.version + 1,
        updated_at=sa.bindparam("now"),
    )
    .returning(*jobs.c)
)
