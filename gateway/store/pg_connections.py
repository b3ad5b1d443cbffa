"""PostgreSQL connections with deadlines: each host of the URL in turn, keepalives on.

One ``PostgresConnector`` per URL opens every connection the process makes to PostgreSQL:
the pool's (``engine.make_engine`` hands it to SQLAlchemy as ``async_creator``), the
LISTEN relay's (``gateway.notify``) and the readiness probe's (``ReadinessProbe``). So a
multi-host URL (``?host=a:5432&host=b:5432&target_session_attrs=read-write``) is read
the same way by all three, and after a failover all three find the new primary.

libpq tries the hosts of a URL in turn, each with its own ``connect_timeout``; asyncpg
spends one timeout on all of them, so a first host that went silent (a partition, not a
refusal) would use up the whole budget and the second would never be tried. Here each
host gets ``connect_timeout`` of its own, and the host that answered last is tried first:
after a failover, connections go to the new primary at once instead of waiting on the
old one each time.

Every statement has ``DatabaseConfig.timeout`` (asyncpg's ``command_timeout``), unless
``statement_timeout`` is off (migrations): a deadline the client keeps (it cancels a
late statement), not a ``statement_timeout`` set in the server's session, which a
transaction pooler would hand to other clients. Behind one (``pooler = "transaction"``)
asyncpg caches no statements and prepares none by name. Every socket gets TCP keepalives and
``TCP_USER_TIMEOUT`` (``DatabaseConfig``): without them a connection to a peer that
vanished without a reset (a silent partition) keeps waiting for the kernel's
retransmissions, about 15 minutes, and the LISTEN connection, idle by design, never
notices at all.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

from sqlalchemy.engine import make_url

from gateway.settings import DatabaseConfig
from gateway.store.failures import DatabaseUnreachable, NoAnswer

log = logging.getLogger("onejob.store")

#: SQLAlchemy's options for its asyncpg adapter, which asyncpg itself does not take.
_ADAPTER_OPTIONS = ("prepared_statement_cache_size", "prepared_statement_name_func")


class PostgresConnector:
    """Open asyncpg connections for one URL (module docstring)."""

    def __init__(
        self, url: str, config: DatabaseConfig | None = None, *, statement_timeout: bool = True
    ) -> None:
        self.config = config or DatabaseConfig()
        parsed = make_url(url)
        _, options = parsed.get_dialect()().create_connect_args(parsed)
        for name in _ADAPTER_OPTIONS:
            options.pop(name, None)
        hosts, ports = options.pop("host", None), options.pop("port", None)
        if isinstance(hosts, list):
            self.targets: list[tuple[str | None, Any]] = list(zip(hosts, ports, strict=True))
        else:
            self.targets = [(hosts, ports)]
        if statement_timeout:
            # asyncpg's deadline for every statement of the connection (a commit too),
            # unless the URL names one (``?command_timeout=``).
            options.setdefault("command_timeout", self.config.timeout)
        if self.config.pooler == "transaction":
            # No statement prepared by name: the next transaction may run on another
            # server connection, where the name means nothing, or another client's
            # statement. Unnamed ones are parsed again with each execution.
            options["statement_cache_size"] = 0
        self._options = options
        self._first = 0  # the host that answered last is tried first

    async def connect(self) -> Any:
        """Return a new asyncpg connection to the first host that takes it.

        Raise ``DatabaseUnreachable`` when none does (each had ``connect_timeout``), or the
        server's refusal when one answered with one (a wrong password, a missing database).
        """
        import asyncpg  # local: only PostgreSQL deployments need it

        last: BaseException | None = None
        refused: BaseException | None = None  # a server that answered and said no
        for turn in range(len(self.targets)):
            index = (self._first + turn) % len(self.targets)
            host, port = self.targets[index]
            try:
                conn = await asyncpg.connect(
                    host=host, port=port, timeout=self.config.connect_timeout, **self._options
                )
            except (
                OSError,
                asyncpg.PostgresError,
                asyncpg.InterfaceError,
                asyncpg.TargetServerAttributeNotMatched,
            ) as exc:
                # OSError covers a refusal and TimeoutError. A standby asked for
                # read-write says ``TargetServerAttributeNotMatched`` (an
                # ``InternalClientError``): after a failover the host tried first is often
                # one, and the primary is further down the list.
                last = exc
                standby = isinstance(exc, asyncpg.TargetServerAttributeNotMatched)
                if not (standby or isinstance(exc, OSError)) and refused is None:
                    refused = exc
                if len(self.targets) > 1:
                    log.debug("PostgreSQL host %s:%s not taken: %r", host, port, exc)
                continue
            self._first = index
            set_keepalives(conn, self.config)
            return conn
        if refused is not None and not isinstance(refused, asyncpg.InterfaceError):
            raise refused  # a wrong password or database name is a mistake, not an outage
        hosts = ", ".join(f"{host or 'default'}:{port or 'default'}" for host, port in self.targets)
        raise DatabaseUnreachable(f"no PostgreSQL host took a connection ({hosts})") from last


def set_keepalives(conn: Any, config: DatabaseConfig) -> bool:
    """Turn on TCP keepalives and ``TCP_USER_TIMEOUT`` on an asyncpg connection's socket.

    Say whether they were set (not on a Unix socket, nor where the platform lacks them).
    """
    sock = socket_of(conn)
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_KEEPIDLE"):  # Linux; macOS names it TCP_KEEPALIVE
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, config.keepalive_idle)
    if hasattr(socket, "TCP_KEEPINTVL"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, config.keepalive_interval)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, config.keepalive_count)
    if hasattr(socket, "TCP_USER_TIMEOUT") and config.tcp_user_timeout > 0:
        milliseconds = int(config.tcp_user_timeout * 1000)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, milliseconds)
    return True


def socket_of(conn: Any) -> Any:
    """Return the socket under an asyncpg connection, or None.

    asyncpg has no public way to set socket options, and its connection keeps its
    transport as ``_transport`` (since its first release); the transport's ``socket``
    extra is asyncio's public API. ``tests/unit/store/test_private_apis.py`` fails, naming
    this function, if asyncpg stops keeping it there.
    """
    transport = getattr(conn, "_transport", None)
    if transport is None:
        log.warning("asyncpg keeps no _transport: TCP keepalives are not set")
        return None
    return transport.get_extra_info("socket")


def terminate(conn: Any) -> None:
    """Drop an asyncpg connection at once: no goodbye to a server that may not answer.

    SQLAlchemy's invalidation closes gracefully first (a Terminate message, then up to
    2 s for the server to hang up); on a silent partition those 2 s are the client's.
    Once terminated, that graceful close finds the connection closed and returns.
    """
    if conn is not None and not conn.is_closed():
        conn.terminate()


async def close_quietly(conn: Any, timeout: float) -> None:
    """Close a healthy connection within ``timeout`` seconds, else terminate it."""
    try:
        await asyncio.wait_for(conn.close(), timeout)
    except Exception:  # a close may fail in any way; the connection goes regardless
        terminate(conn)


class ReadinessProbe:
    """Ask PostgreSQL ``SELECT 1`` on a connection of its own, within a deadline.

    Not through the pool: a probe must not wait behind requests for a connection, nor
    find one whose socket went silent. Its connection is opened by the connector (so it
    follows a multi-host URL to the primary) and kept between probes; any failure drops
    it, and the next probe opens a fresh one, which, after a partition heals, answers at
    once instead of waiting out the old socket's retransmission backoff.
    """

    def __init__(self, connector: PostgresConnector) -> None:
        self._connector = connector
        self._conn: Any = None
        self._lock = asyncio.Lock()

    async def ping(self, timeout: float) -> None:
        """Return once PostgreSQL answered; raise ``NoAnswer`` or its error otherwise."""
        try:
            async with asyncio.timeout(timeout), self._lock:
                try:
                    if self._conn is None or self._conn.is_closed():
                        self._conn = await self._connector.connect()
                    await self._conn.fetchval("SELECT 1")
                except BaseException:
                    terminate(self._conn)
                    self._conn = None
                    raise
        except TimeoutError as exc:
            raise NoAnswer(f"PostgreSQL did not answer within {timeout:g} s") from exc

    async def close(self) -> None:
        """Close the probe's connection."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await close_quietly(conn, 1.0)
