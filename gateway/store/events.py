"""The audit trail: every transition, replay, conflict, refusal and lost race, appended.

Events are written in the transaction of the change they record (``WriteTx.event``); an
event with no change of its own (a refused fallback button) is recorded alone
(``record_event``). They are read back oldest first (``audit.Audit``).
"""

from __future__ import annotations

import functools
from typing import Any

import sqlalchemy as sa

from gateway.store.rows import EVENT_COLUMNS
from gateway.store.tables import job_events

INSERT_EVENTS = job_events.insert()


@functools.lru_cache(maxsize=8)
def insert_events_statement(rows: int) -> Any:
    """Return one multi-row INSERT of ``rows`` audit events (parameters ``<column>_<n>``).

    Written as ``text`` with typed binds, not ``insert().values([...])``: SQLAlchemy gives a
    multi-row VALUES construct no cache key, so it was compiled again on every execution
    (py-spy: the compiler at 5 % of a SQLite creation). A ``text`` statement is cached.
    """
    values = ", ".join(
        "(" + ", ".join(f":{c}_{n}" for c in EVENT_COLUMNS) + ")" for n in range(rows)
    )
    sql = f"INSERT INTO {job_events.name} ({', '.join(EVENT_COLUMNS)}) VALUES {values}"
    return sa.text(sql).bindparams(
        *(
            sa.bindparam(f"{c}_{n}", type_=job_events.c[c].type)
            for n in range(rows)
            for c in EVENT_COLUMNS
        )
    )


@functools.lru_cache(maxsize=8)
def insert_events_sql(rows: int) -> str:
    """The same as ``insert_events_statement``, as SQLite's driver takes it (``?``)."""
    one = "(" + ", ".join("?" * len(EVENT_COLUMNS)) + ")"
    return f"INSERT INTO job_events ({', '.join(EVENT_COLUMNS)}) VALUES {', '.join([one] * rows)}"
