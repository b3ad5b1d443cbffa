"""P1's denominator: pgbench sends the store's own creation statement, only its parameters
replaced by pgbench expressions."""

from __future__ import annotations

import re

from bench.lib.pgbench import pgbench_script
from gateway.store.create import CREATE


def test_the_script_is_the_stores_statement_with_every_parameter_replaced() -> None:
    script = pgbench_script()
    setting, statement = script.split("\n", 1)
    assert setting == "\\set n random(1, 9000000000000000)"
    assert re.search(r"\$\d", statement) is None
    # Every piece of the store's text between two parameters is there, in order.
    at = 0
    for piece in re.split(r"\$\d+", " ".join(CREATE.split())):
        found = statement.find(piece.strip(), at)
        assert found >= 0, piece
        at = found + len(piece.strip())
    assert statement.rstrip().endswith(";")


def test_every_job_attempt_and_key_is_new_per_transaction() -> None:
    script = pgbench_script()
    assert "'job_' || :client_id || '_' || :n" in script
    assert "'att_' || :client_id || '_' || :n" in script
    assert "'key-' || :client_id || '-' || :n" in script
