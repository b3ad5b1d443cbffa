"""What a database URL says: whether onejob has its driver, which database it is, whether
it is on this host.

``check_database_url`` refuses, at settings time, a URL of a driver onejob does not use,
with the URL to write instead (``postgres://`` -> ``postgresql+asyncpg://``); ``redacted``
hides its password wherever a URL is shown. ``DatabaseKind`` is what differs between the
two databases before one is opened (how many processes may share it, whether it relays
changes with LISTEN, whether it has standbys); once opened, the store's dialect object
carries the rest (``gateway/store/dialects.py``). Nothing else asks which database a URL
names.
"""

from __future__ import annotations

import enum
import ipaddress
import os
from collections.abc import Mapping
from typing import Annotated

from pydantic import AfterValidator

#: The database URL schemes onejob runs on (its drivers: aiosqlite and asyncpg).
DATABASE_SCHEMES = ("sqlite+aiosqlite", "postgresql+asyncpg")
#: Schemes of other drivers of the same two databases, and the one to write instead.
_DRIVER_HINTS = {
    "postgres": "postgresql+asyncpg",
    "postgresql": "postgresql+asyncpg",
    "postgresql+psycopg": "postgresql+asyncpg",
    "postgresql+psycopg2": "postgresql+asyncpg",
    "postgresql+pg8000": "postgresql+asyncpg",
    "sqlite": "sqlite+aiosqlite",
    "sqlite+pysqlite": "sqlite+aiosqlite",
}


class DatabaseKind(enum.Enum):
    """The database a URL names, and what that decides before it is opened."""

    SQLITE = "sqlite"
    POSTGRESQL = "postgresql"

    @classmethod
    def of(cls, url: str) -> DatabaseKind:
        """The database ``url`` names (a URL ``check_database_url`` let through)."""
        return cls.SQLITE if url.partition("://")[0].startswith("sqlite") else cls.POSTGRESQL

    @property
    def one_process(self) -> bool:
        """Its processes would share one write lock (a file): serve it from one process."""
        return self is DatabaseKind.SQLITE

    @property
    def listens(self) -> bool:
        """It tells other processes' changes (LISTEN/NOTIFY): run the relay."""
        return self is DatabaseKind.POSTGRESQL

    @property
    def replicated(self) -> bool:
        """It may stream to standbys: check for a synchronous one at start."""
        return self is DatabaseKind.POSTGRESQL


def check_database_url(url: str) -> None:
    """Refuse a database URL onejob cannot open, saying what to write instead."""
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise ValueError(
            f"{redacted(url)!r} is not a database URL: write sqlite+aiosqlite:///PATH "
            "or postgresql+asyncpg://USER@HOST:PORT/DATABASE"
        )
    if scheme in DATABASE_SCHEMES:
        return
    if instead := _DRIVER_HINTS.get(scheme.lower()):
        raise ValueError(
            f"{scheme}:// is not a driver onejob uses: write "
            f"{instead}://{redacted(url).partition('://')[2]}"
        )
    raise ValueError(
        f"onejob runs on SQLite (sqlite+aiosqlite:///PATH) or PostgreSQL "
        f"(postgresql+asyncpg://USER@HOST:PORT/DATABASE), not {scheme}://"
    )


def _check_postgres_url(url: str) -> str:
    check_database_url(url)
    if DatabaseKind.of(url) is not DatabaseKind.POSTGRESQL:
        raise ValueError("write a PostgreSQL URL here: postgresql+asyncpg://USER@HOST:PORT/DB")
    return url


#: A setting that holds a PostgreSQL URL (``[database] listen_url``).
PostgresUrl = Annotated[str, AfterValidator(_check_postgres_url)]


def relay_url(database_url: str, listen_url: str | None, pooler: str) -> str | None:
    """Return the URL the LISTEN relay connects to, or None when none runs: SQLite has
    no LISTEN, and a transaction pooler in front of PostgreSQL needs ``listen_url``.

    LISTEN holds a session: a transaction pooler (``pooler = "transaction"``) hands the
    server connection to another client after every transaction, and notifications
    would reach whoever holds it. So behind one the relay needs a direct ``listen_url``;
    without it, no relay runs and other processes' changes are found by polling (the
    dispatcher's ``poll_interval``, a waiter's re-read), as when the relay is down.
    """
    if not DatabaseKind.of(database_url).listens:
        return None
    if listen_url is not None:
        return listen_url
    return None if pooler == "transaction" else database_url


def redacted(url: str) -> str:
    """Hide a password in a database URL."""
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not at or ":" not in creds:
        return url
    return f"{scheme}{sep}{creds.split(':', 1)[0]}:***@{host}"


def database_on_this_host(database_url: str, env: Mapping[str, str] | None = None) -> bool:
    """Say whether a PostgreSQL URL reaches this machine only: every host it names (the
    URL's, or its ``host=`` query parameters, which the driver prefers) is a loopback
    address or a Unix socket directory; no host at all is ``PGHOST``'s, else the
    driver's default socket. A proxy on localhost in front of a remote database counts
    as local: set ``workers`` there."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(database_url)
    except (ArgumentError, ValueError):  # a malformed URL is refused where it is opened
        return False
    query_host = url.query.get("host")
    named = query_host if isinstance(query_host, tuple) else (query_host,)
    hosts = [h for value in named if value for h in value.split(",")]
    if not hosts:
        hosts = [url.host or (os.environ if env is None else env).get("PGHOST", "")]
    return all(_local_host(h) for h in hosts)


def _local_host(host: str) -> bool:
    """A Unix socket directory, no host (the default socket), ``localhost`` or a loopback
    address, with or without a port (``[::1]:5432``, ``127.0.0.1:5432``)."""
    host = host.strip().lower()
    if host.startswith("/") or host in ("", "localhost"):
        return True
    if host.startswith("["):
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:  # name:port; more colons is a bare IPv6 address
        host = host.partition(":")[0]
        if host == "localhost":
            return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name other than localhost
        return False
