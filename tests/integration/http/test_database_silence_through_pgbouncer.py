"""A silent database behind PgBouncer in transaction mode: still a 503 at the deadline.

The bodies of ``test_database_silence.py`` again, with PgBouncer between the gateway and
the database's network (gateway -> PgBouncer -> the fault relay -> PostgreSQL), set as
docs/operations.md ("Behind PgBouncer") says, scaled to these tests' deadlines (1 s
statements, 3 s to connect), and ``[database] pooler = "transaction"``: every request is
answered within the deadline plus a second, only with 201 or 503; ``/readyz`` says 503
while the database is silent and 200 after; the first 201 comes within 2 s of the heal;
``Prefer: wait`` answers at its deadline; every acknowledged job is stored.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from gateway.settings import DatabaseConfig
from scenarios.pgbouncer import PgBouncer, pgbouncer_binary, start_pgbouncer
from tests.integration.http import test_database_silence as silence
from tests.integration.http.test_database_silence import (
    relay,  # noqa: F401  (the fixture: the relay in front of PostgreSQL)
    test_a_silent_database_under_load_gets_timely_503s_and_recovers_at_once,  # noqa: F401
    test_prefer_wait_answers_at_its_deadline_while_the_database_is_silent,  # noqa: F401
)

sys.path.insert(0, str(Path(__file__).parents[1] / "faults"))  # the relay
from fault_relay import FaultRelay

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.parametrize(
        "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
    ),
]

#: The deadlines of ``test_database_silence``, behind a transaction pooler.
DEADLINE = DatabaseConfig(timeout=1.0, connect_timeout=3.0, pooler="transaction")
#: PgBouncer's own waits, as docs/operations.md sets them, scaled to ``DEADLINE``.
WAITS = {
    "query_wait_timeout": 1,
    "server_connect_timeout": 3,
    "server_check_delay": 1,
    "tcp_keepalive": 1,
    "tcp_keepidle": 1,
    "tcp_keepintvl": 1,
    "tcp_keepcnt": 2,
    "tcp_user_timeout": 2000,
    "idle_transaction_timeout": 10,
}


@pytest.fixture
def relayed_url(
    database_url: str,
    relay: FaultRelay,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[str]:
    """The test database through a PgBouncer whose server connections cross the relay."""
    binary = pgbouncer_binary()
    if binary is None:
        reason = "pgbouncer is not installed (Debian: apt-get install pgbouncer)"
        if os.environ.get("ONEJOB_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PgBouncer required (ONEJOB_REQUIRE_POSTGRES=1): {reason}")
        pytest.skip(reason)
    behind = make_url(database_url).set(host="127.0.0.1", port=relay.port)
    bouncer: PgBouncer = start_pgbouncer(
        binary, tmp_path, behind.render_as_string(hide_password=False), settings=WAITS
    )
    monkeypatch.setattr(silence, "DEADLINE", DEADLINE)  # the bodies' gateway and bounds
    try:
        yield bouncer.url(database_url)
    finally:
        bouncer.stop()
