"""The creation statement as pgbench runs it: the store's own SQL, with pgbench values.

``python -m scenarios.load.compare`` runs pgbench with this script, so "onejob against its
own database" compares the gateway with the statement it sends (``create.CREATE``,
with the first attempt claimed, as the fast path sends it), not with a hand-written copy.
The gateway sends ``CREATE_BY_KEY`` (the API key checked in the statement): pgbench gave
the two the same TPS within noise (docs/benchmarks.md). Its parameters
become pgbench expressions that make every job, attempt and key new.
"""

from __future__ import annotations

import json
import re

from gateway.store.create import CREATE

_INPUT = {
    "ticket_id": "SUP-42",
    "channel": "email",
    "customer": {"name": "Priya", "plan": "pro"},
    "subject": "Charged twice",
    "body": "My card was charged twice for March.",
}
_JOB = "'job_' || :client_id || '_' || :n"
_ATTEMPT = "'att_' || :client_id || '_' || :n"


def _text(value: object) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def pgbench_script() -> str:
    """Return a pgbench script running the store's one-statement creation, claimed."""
    details = [
        {"contract": "ticket-triage@1", "provider": "upstream"},
        {"number": 1, "provider": "upstream", "reason": "initial"},
        {"worker": "bench", "read_version": 1, "in_process": True},
    ]
    values = {
        1: _JOB,
        2: "'bench'",
        3: "'key-' || :client_id || '-' || :n",
        4: _text("f" * 64),
        5: "'ticket-triage@1'",
        6: "'upstream'",
        7: "NULL",
        8: _text(json.dumps(_INPUT)),
        9: "'running'",
        10: "now()::timestamp",
        11: _ATTEMPT,
        12: "'running'",
        13: "1",
        14: "'bench'",
        15: "now()::timestamp + interval '15 seconds'",
        16: "now()::timestamp + interval '30 seconds'",
        17: "now()::timestamp",
        18: f"ARRAY[NULL, {_ATTEMPT}, {_ATTEMPT}]",
        19: "ARRAY['job_created', 'attempt_created', 'attempt_running']",
        20: "ARRAY[" + ", ".join(_text(json.dumps(d)) for d in details) + "]",
    }
    sql = re.sub(r"\$(\d+)", lambda m: f"({values[int(m.group(1))]})", CREATE)
    return "\\set n random(1, 9000000000000000)\n" + " ".join(sql.split()) + ";\n"
