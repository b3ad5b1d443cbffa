"""Tell a lost or unreachable database apart from a bug, whatever the driver raised.

The HTTP layer answers the first with 503 (safe to retry with the same Idempotency-Key:
the transaction rolled back, or committed and a retry replays it) and the second with
500. The drivers disagree on how a lost connection looks, so the knowledge stays here:

- asyncpg: a terminated backend is ``DBAPIError`` (``connection_invalidated``, or
  SQLSTATE 57P01 admin_shutdown), a connection dropped mid-statement an ``InternalError``
  from asyncpg's ``InternalClientError`` ("cannot switch to state ..."), a refused
  connect a bare ``OSError``/``ConnectionRefusedError`` or ``TimeoutError`` from asyncpg;
- aiosqlite: an unreachable, locked, read-only or full file is ``OperationalError`` with
  a primary result code such as SQLITE_CANTOPEN or SQLITE_BUSY, while a missing table
  (SQLITE_ERROR) is also ``OperationalError`` but a bug;
- the pool: ``sqlalchemy.exc.TimeoutError`` (no connection free in time) and
  ``DisconnectionError``;
- a standby (a stale URL, DNS name or VIP still pointing at a demoted primary): SQLSTATE
  25006 ``read_only_sql_transaction``, nothing written;
- a deadline (``DatabaseConfig``): asyncpg's ``TimeoutError`` once a statement outlived
  its ``command_timeout``, or a connect that did not finish in time.

``outcome_unknown`` tells the one case a client must hear about: the statement was sent
and no answer came, so it may have committed (a retry with the same key is still safe:
it replays what committed, or does it once).

A constraint violation, a programming error or any other exception is not "unavailable".
"""

from __future__ import annotations

import sqlite3
from types import TracebackType

import sqlalchemy.exc

#: SQLSTATE classes of a lost or refused connection: 08 connection exception,
#: 53 insufficient resources (too many connections), 57 operator intervention
#: (admin shutdown, crash shutdown, cannot connect now), 58 system error (I/O).
UNAVAILABLE_SQLSTATE_CLASSES = frozenset({"08", "53", "57", "58"})
#: Single SQLSTATEs that mean "not here, not now": 25006 read_only_sql_transaction (a
#: standby reached through a URL that has not followed a failover).
UNAVAILABLE_SQLSTATES = frozenset({"25006"})
#: Errors raised before a statement could be sent: a retry finds nothing written.
_BEFORE_SENDING = (
    "NotSent",
    "DatabaseUnreachable",
    "CannotConnectNowError",
    "TooManyConnectionsError",
    "ConnectionRefusedError",
    "TargetServerAttributeNotMatched",
)
#: SQLite primary result codes that mean the file cannot be used now (not a bug).
UNAVAILABLE_SQLITE_CODES = frozenset(
    {
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_NOMEM,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_PROTOCOL,
    }
)
#: Packages whose OSError or TimeoutError is the network to the database failing.
_DRIVER_PACKAGES = ("asyncpg", "aiosqlite", "sqlalchemy")
_CLOSED_MESSAGES = ("connection is closed", "connection was closed", "cannot switch to state")


class NotSent(TimeoutError):
    """A statement waited its whole deadline for its turn and was never sent."""


class NoAnswer(TimeoutError):
    """The database did not answer within a deadline of ours (a readiness probe's)."""


class DatabaseUnreachable(ConnectionError):
    """No host of the URL took a connection within its ``connect_timeout``; nothing was sent."""


def database_unavailable(exc: BaseException) -> bool:
    """Say whether ``exc`` means the database is unreachable or the connection was lost."""
    if isinstance(exc, NotSent | NoAnswer | DatabaseUnreachable):
        return True
    if isinstance(exc, sqlalchemy.exc.DBAPIError):
        return _dbapi_unavailable(exc)
    if isinstance(exc, sqlalchemy.exc.DisconnectionError | sqlalchemy.exc.TimeoutError):
        return True
    if type(exc).__module__.startswith("asyncpg."):
        # The hot creation path talks to asyncpg directly (``pg_bare.checkout``), so its
        # errors arrive untranslated.
        return _driver_error_unavailable(exc)
    if isinstance(exc, OSError):  # ConnectionError and TimeoutError are OSErrors
        return _raised_by_driver(exc.__traceback__)
    return False


def _dbapi_unavailable(exc: sqlalchemy.exc.DBAPIError) -> bool:
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    if _sqlstate_unavailable(orig):
        return True
    code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in UNAVAILABLE_SQLITE_CODES
    if isinstance(exc, sqlalchemy.exc.InternalError | sqlalchemy.exc.InterfaceError):
        return _says_connection_broke(orig)
    return isinstance(orig, OSError)


def _driver_error_unavailable(exc: BaseException) -> bool:
    """Classify an untranslated asyncpg exception like its SQLAlchemy translation."""
    if _sqlstate_unavailable(exc):
        return True
    name = type(exc).__name__
    if name in {"InternalClientError", "InterfaceError", "ConnectionDoesNotExistError"}:
        return _says_connection_broke(exc)
    return False


def _sqlstate_unavailable(error: object) -> bool:
    sqlstate = getattr(error, "sqlstate", None) or getattr(error, "pgcode", None)
    return isinstance(sqlstate, str) and (
        sqlstate[:2] in UNAVAILABLE_SQLSTATE_CLASSES or sqlstate in UNAVAILABLE_SQLSTATES
    )


def outcome_unknown(exc: BaseException) -> bool:
    """Say whether an unavailable database may still have committed what was sent.

    True for a statement that got no answer (its deadline passed, or its connection
    broke while it was out); false when nothing could be sent (no connection could be
    opened or taken from the pool in time, a standby refused to write).
    """
    if isinstance(exc, sqlalchemy.exc.TimeoutError | sqlalchemy.exc.DisconnectionError):
        return False  # the pool had no connection to give: nothing was sent
    error: BaseException | None = exc
    while error is not None:
        if type(error).__name__ in _BEFORE_SENDING or _read_only(error):
            return False
        error = getattr(error, "orig", None) or error.__cause__
    return True


def _read_only(error: object) -> bool:
    return getattr(error, "sqlstate", None) in UNAVAILABLE_SQLSTATES


def _says_connection_broke(error: object) -> bool:
    # asyncpg's InternalClientError and InterfaceError on a broken connection; the same
    # classes also mean misuse of a healthy connection (a bug), told apart by the text.
    message = str(error).lower()
    return any(text in message for text in _CLOSED_MESSAGES)


def _raised_by_driver(tb: TracebackType | None) -> bool:
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        if isinstance(module, str) and module.split(".", 1)[0] in _DRIVER_PACKAGES:
            return True
        tb = tb.tb_next
    return False
