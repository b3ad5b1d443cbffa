"""A multi-host URL's connector walks past hosts that are not the primary.

``target_session_attrs=read-write`` makes asyncpg refuse a standby with
``TargetServerAttributeNotMatched``, an ``InternalClientError`` (not an
``InterfaceError``). After a failover the host tried first is often a standby (the old
primary rejoined, or the other standby): the connector must go on to the next host, and
when no host is a primary it must say ``DatabaseUnreachable`` (a 503), not let the
driver's error through (a 500). asyncpg is replaced here: no server is needed.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from gateway.store.failures import DatabaseUnreachable, database_unavailable
from gateway.store.pg_connections import PostgresConnector

URL = (
    "postgresql+asyncpg://postgres@/onejob?host=127.0.0.1:5001&host=127.0.0.1:5002"
    "&host=127.0.0.1:5003&target_session_attrs=read-write"
)


class FakeConnection:
    """What the connector needs of a connection: no socket, so no keepalives."""

    _transport = None

    def __init__(self, port: int) -> None:
        self.port = port


def formation(monkeypatch: pytest.MonkeyPatch, primary: int | None) -> list[int]:
    """Make asyncpg.connect see the ports as standbys, except ``primary``; log the tries."""
    tried: list[int] = []

    async def connect(*, host: str, port: int, **options: Any) -> FakeConnection:
        tried.append(port)
        assert options["target_session_attrs"] == "read-write"
        if port != primary:
            raise asyncpg.TargetServerAttributeNotMatched(
                "None of the hosts match the target attribute requirement read-write"
            )
        return FakeConnection(port)

    monkeypatch.setattr(asyncpg, "connect", connect)
    return tried


async def test_a_standby_listed_first_is_passed_over_for_the_primary_behind_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tried = formation(monkeypatch, primary=5003)
    conn = await PostgresConnector(URL).connect()
    assert conn.port == 5003
    assert tried == [5001, 5002, 5003]


async def test_no_primary_among_the_hosts_is_database_unreachable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tried = formation(monkeypatch, primary=None)
    with pytest.raises(DatabaseUnreachable) as caught:
        await PostgresConnector(URL).connect()
    assert tried == [5001, 5002, 5003]
    assert database_unavailable(caught.value)  # a 503 with Retry-After, not a 500
