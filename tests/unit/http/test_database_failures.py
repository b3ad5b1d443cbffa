"""Which database errors are "unavailable" (503) and which are bugs (500)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import sqlalchemy as sa
import sqlalchemy.exc

from gateway.store.failures import database_unavailable


def _raised(url: str, *statements: str) -> sqlalchemy.exc.DBAPIError:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.exec_driver_sql(statement)
    except sqlalchemy.exc.DBAPIError as exc:
        return exc
    finally:
        engine.dispose()
    raise AssertionError("no error raised")


def test_a_sqlite_file_that_cannot_be_opened_is_unavailable(tmp_path: Path) -> None:
    exc = _raised(f"sqlite:///{tmp_path / 'missing' / 'x.db'}", "SELECT 1")
    assert isinstance(exc, sqlalchemy.exc.OperationalError)
    assert database_unavailable(exc)


def test_a_missing_table_and_a_unique_violation_are_bugs_not_outages() -> None:
    missing = _raised("sqlite://", "SELECT * FROM nowhere")
    assert isinstance(missing, sqlalchemy.exc.OperationalError)  # same class as an outage
    assert not database_unavailable(missing)
    duplicate = _raised(
        "sqlite://",
        "CREATE TABLE t (k TEXT UNIQUE)",
        "INSERT INTO t VALUES ('a')",
        "INSERT INTO t VALUES ('a')",
    )
    assert isinstance(duplicate, sqlalchemy.exc.IntegrityError)
    assert not database_unavailable(duplicate)
    syntax = _raised("sqlite://", "SELEC 1")
    assert not database_unavailable(syntax)


def test_an_invalidated_connection_is_unavailable_whatever_its_class() -> None:
    exc = sqlalchemy.exc.DBAPIError(
        "SELECT 1", None, Exception("terminated"), connection_invalidated=True
    )
    assert database_unavailable(exc)
    assert not database_unavailable(
        sqlalchemy.exc.DBAPIError("SELECT 1", None, Exception("x"), connection_invalidated=False)
    )


class _PgError(Exception):
    def __init__(self, message: str, sqlstate: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("sqlstate", "unavailable"),
    [("57P01", True), ("08006", True), ("53300", True), ("23505", False), ("42P01", False)],
)
def test_postgres_errors_are_classified_by_their_sqlstate_class(
    sqlstate: str, unavailable: bool
) -> None:
    exc = sqlalchemy.exc.DBAPIError("SELECT 1", None, _PgError("x", sqlstate))
    assert database_unavailable(exc) is unavailable


def test_a_broken_protocol_state_is_unavailable_but_other_internal_errors_are_bugs() -> None:
    lost = sqlalchemy.exc.InternalError(
        "SELECT 1", None, Exception("cannot switch to state 15; another operation is in progress")
    )
    assert database_unavailable(lost)
    other = sqlalchemy.exc.InternalError("SELECT 1", None, Exception("cache lookup failed"))
    assert not database_unavailable(other)


async def test_an_oserror_counts_only_when_the_database_driver_raised_it(
    tmp_path: Path,
) -> None:
    import asyncpg

    try:
        (tmp_path / "no-such-file").read_text()
    except OSError as exc:
        assert not database_unavailable(exc)  # our own file, not the database
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    try:
        await asyncpg.connect(f"postgresql://x@127.0.0.1:{port}/x", timeout=5)
    except OSError as exc:
        assert database_unavailable(exc)
    else:
        raise AssertionError("connected to a closed port")


def test_untranslated_asyncpg_errors_of_the_raw_hot_path_are_classified_alike() -> None:
    import asyncpg

    assert database_unavailable(
        asyncpg.exceptions.InternalClientError(
            "cannot switch to state 12; another operation (2) is in progress"
        )
    )
    assert database_unavailable(asyncpg.exceptions.AdminShutdownError("terminating connection"))
    assert database_unavailable(
        asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle")
    )
    assert not database_unavailable(asyncpg.exceptions.UniqueViolationError("duplicate key"))
    assert not database_unavailable(asyncpg.exceptions.InternalClientError("bad codec"))


def test_a_standby_refusing_to_write_is_unavailable_and_nothing_was_written() -> None:
    """A URL, DNS name or VIP still pointing at a demoted primary: 503, not 500, and the
    client may retry knowing nothing was done."""
    import asyncpg

    from gateway.store.failures import outcome_unknown

    error = asyncpg.exceptions.ReadOnlySQLTransactionError(
        "cannot execute INSERT in a read-only transaction"
    )
    assert database_unavailable(error)
    assert not outcome_unknown(error)
    wrapped = sqlalchemy.exc.DBAPIError("INSERT ...", None, error)
    assert database_unavailable(wrapped)
    assert not outcome_unknown(wrapped)


def test_a_statement_without_an_answer_may_have_been_done_and_one_never_sent_was_not() -> None:
    from gateway.store.failures import DatabaseUnreachable, NotSent, outcome_unknown

    late = sqlalchemy.exc.DBAPIError("SELECT 1", None, TimeoutError(), connection_invalidated=True)
    assert outcome_unknown(late)
    for never in (
        NotSent("waited in line"),
        DatabaseUnreachable("no host"),
        sqlalchemy.exc.TimeoutError("pool"),
    ):
        assert database_unavailable(never)
        assert not outcome_unknown(never)
