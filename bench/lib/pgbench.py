"""pgbench with the store's creation statement: the denominator of P1.

``python -m bench.compare`` runs pgbench with this script, so "onejob against its own
database" compares the gateway with the statement it sends (``create.CREATE``,
imported from the store, with the first attempt claimed, as the fast path sends it), not
with a hand-written copy. The gateway sends ``CREATE_BY_KEY`` (the API key checked in the
statement): pgbench gave the two the same TPS within noise (docs/benchmarks.md). Its
parameters become pgbench expressions that make every job, attempt and key new.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from bench.lib.databases import libpq
from bench.lib.loads import INPUT
from bench.lib.measure import host_busy_s
from bench.lib.wrk import WRK_THREADS
from gateway.store.create import CREATE

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
        8: _text(json.dumps(INPUT)),
        9: "'running'",
        10: "now()::timestamp",
        11: _ATTEMPT,
        12: "'running'",
        13: "1",
        14: "'bench'",
        15: "now()::timestamp + interval '15 seconds'",
        16: "now()::timestamp + interval '30 seconds'",
        17: "now()::timestamp",
        18: "now()::timestamp + interval '600 seconds'",
        19: "now()::timestamp",
        20: "NULL",  # no traceparent, as most requests come
        21: "NULL",
        22: f"ARRAY[NULL, {_ATTEMPT}, {_ATTEMPT}]",
        23: "ARRAY['job_created', 'attempt_created', 'attempt_running']",
        24: "ARRAY[" + ", ".join(_text(json.dumps(d)) for d in details) + "]",
    }
    sql = re.sub(r"\$(\d+)", lambda m: f"({values[int(m.group(1))]})", CREATE)
    return "\\set n random(1, 9000000000000000)\n" + " ".join(sql.split()) + ";\n"


def pgbench(url: str, clients: int, duration: float, work: Path) -> dict[str, Any]:
    """Run pgbench with onejob's creation SQL; return TPS and latency."""
    script = work / "create.sql"
    script.write_text(pgbench_script(), encoding="utf-8")
    host = host_busy_s()
    out = subprocess.run(
        [
            "pgbench",
            "-n",
            "-M",
            "prepared",
            "-f",
            str(script),
            "-c",
            str(clients),
            "-j",
            str(min(clients, WRK_THREADS)),
            "-T",
            str(int(duration)),
            libpq(url),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=duration + 60,
    )
    busy = host_busy_s() - host
    tps = re.search(r"tps = ([\d.]+)", out.stdout)
    lat = re.search(r"latency average = ([\d.]+) ms", out.stdout)
    done = re.search(r"number of transactions actually processed: (\d+)", out.stdout)
    if tps is None:
        raise SystemExit(f"pgbench failed:\n{out.stdout}\n{out.stderr}")
    return {
        "clients": clients,
        "tps": round(float(tps.group(1)), 1),
        "latency_avg_ms": float(lat.group(1)) if lat else None,
        # PostgreSQL's and pgbench's together, per transaction.
        "host_cpu_ms_per_txn": round(busy * 1000 / int(done.group(1)), 3) if done else None,
    }
