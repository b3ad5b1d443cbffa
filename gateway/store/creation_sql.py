"""The creation transaction as pgbench runs it: the store's own statements, compiled.

``python -m scenarios.load.compare`` runs pgbench with this script, so "onejob against its
own database" compares the gateway with the SQL it sends, not with a hand-written copy.
Parameters become pgbench expressions that make every job, attempt and key new.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sqlalchemy.dialects.postgresql import asyncpg

from gateway.store.statements import INSERT_ATTEMPT, insert_events_statement, insert_job_statement

_INPUT = {
    "ticket_id": "SUP-42",
    "channel": "email",
    "customer": {"name": "Priya", "plan": "pro"},
    "subject": "Charged twice",
    "body": "My card was charged twice for March.",
}
_JOB = "'job_' || :client_id || '_' || :n"
_ATTEMPT = "'att_' || :client_id || '_' || :n"


def _literal(value: Any) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def _render(statement: Any, params: dict[str, str]) -> str:
    """Compile ``statement`` for asyncpg and put pgbench expressions in its parameters."""
    dialect = asyncpg.dialect()  # type: ignore[no-untyped-call]
    compiled = statement.compile(dialect=dialect, column_keys=list(params))
    sql = str(compiled)
    names = compiled.positiontup  # $1, $2, ... in order
    return re.sub(r"\$(\d+)", lambda m: f"({params[names[int(m.group(1)) - 1]]})", sql) + ";"


def pgbench_script() -> str:
    """Return a pgbench script: BEGIN, the store's three creation statements, COMMIT."""
    now = "now()"
    job = {
        "id": _JOB,
        "owner_id": "'bench'",
        "idempotency_key": "'key-' || :client_id || '-' || :n",
        "fingerprint": _literal("f" * 64),
        "contract": "'ticket-triage@1'",
        "provider": "'upstream'",
        "requested_provider": "NULL",
        "input": _literal(json.dumps(_INPUT)),
        "status": "'running'",
        "version": "1",
        "created_at": now,
        "updated_at": now,
    }
    attempt = {
        "id": _ATTEMPT,
        "job_id": _JOB,
        "number": "1",
        "provider": "'upstream'",
        "reason": "'initial'",
        "state": "'running'",
        "downstream_key": f"{_JOB} || '/1'",
        "created_at": now,
        "read_version": "1",
        "lease_owner": "'bench'",
        "lease_expires_at": "now() + interval '15 seconds'",
        "deadline_at": "now() + interval '30 seconds'",
        "started_at": now,
    }
    kinds = [
        ("job_created", {"contract": "ticket-triage@1", "provider": "upstream"}, "NULL"),
        ("attempt_created", {"number": 1, "provider": "upstream", "reason": "initial"}, _ATTEMPT),
        ("attempt_running", {"worker": "bench", "read_version": 1, "in_process": True}, _ATTEMPT),
    ]
    events: dict[str, str] = {}
    for n, (kind, detail, attempt_id) in enumerate(kinds):
        events.update(
            {
                f"job_id_{n}": _JOB,
                f"attempt_id_{n}": attempt_id,
                f"kind_{n}": _literal(kind),
                f"detail_{n}": _literal(json.dumps(detail)),
                f"at_{n}": now,
            }
        )
    lines = [
        r"\set n random(1, 9000000000000000)",
        "BEGIN;",
        _render(insert_job_statement("postgresql"), job),
        _render(INSERT_ATTEMPT, attempt),
        _render(insert_events_statement(len(kinds)), events),
        "COMMIT;",
    ]
    return "\n".join(lines) + "\n"
