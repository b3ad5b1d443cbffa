"""What a command says when it cannot start: one line with the fix, never a traceback.

``cli.main`` asks ``explain`` about an exception a command raised. Only the mistakes an
operator makes before anything runs are explained (the settings refused, the database
not there, refusing the login, or not a file SQLite can open, a port ``serve`` needs
taken); anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

#: PostgreSQL's SQLSTATEs of a connection refused at login, and what to do about each.
_LOGIN_REFUSALS = {
    "3D000": "create it (createdb) or fix the database name in the URL",
    "28P01": "fix the user or password in the URL",
    "28000": "fix the user in the URL, or pg_hba.conf",
}
_DATABASE_VARIABLES = "--database-url or ONEJOB_DATABASE_URL"


def explain(exc: BaseException) -> str | None:
    """Return the line (or lines) telling the operator what to fix, or None for a bug."""
    from gateway.server import CannotListen
    from gateway.settings import SettingsError
    from gateway.store.failures import DatabaseUnreachable

    if isinstance(exc, SettingsError | CannotListen):
        return str(exc)
    if isinstance(exc, DatabaseUnreachable):
        cause = _reason(exc.__cause__) if exc.__cause__ is not None else ""
        return (
            f"cannot connect to the database: {exc}{cause}; start PostgreSQL there "
            f"or fix {_DATABASE_VARIABLES}"
        )
    for error in _chain(exc):
        sqlstate = getattr(error, "sqlstate", None)
        if isinstance(sqlstate, str) and sqlstate in _LOGIN_REFUSALS:
            return f"the database refused the connection: {error}; {_LOGIN_REFUSALS[sqlstate]}"
        if isinstance(error, sqlite3.OperationalError) and "unable to open" in str(error):
            return (
                f"SQLite cannot open the database file ({error}): does its directory exist "
                f"and may this user write there? Fix {_DATABASE_VARIABLES}"
            )
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """Yield ``exc`` and what caused it, the driver's own error last."""
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        orig = getattr(error, "orig", None)  # a SQLAlchemy DBAPIError wraps the driver's
        if isinstance(orig, BaseException):
            yield orig
        error = error.__cause__ or error.__context__


def _reason(cause: BaseException) -> str:
    if isinstance(cause, ConnectionRefusedError):
        return " (connection refused)"
    text = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause)
    return f" ({text or type(cause).__name__})"
