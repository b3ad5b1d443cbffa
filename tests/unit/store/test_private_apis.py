"""The private attributes of dependencies the store relies on are still there.

Each test names the shortcut that needs the attribute, so an upgrade that removes one
fails here, loudly, rather than somewhere under load.
"""

from __future__ import annotations

import asyncio
import socket
import types

import asyncpg

from gateway.settings import DatabaseConfig
from gateway.store.pg_connections import set_keepalives, socket_of


def test_asyncpg_connections_keep_their_transport_for_the_keepalives() -> None:
    """``pg_connections.socket_of`` reads ``asyncpg.Connection._transport``."""
    why = (
        "asyncpg.Connection no longer has _transport: gateway.store.pg_connections.socket_of "
        "cannot set TCP keepalives and TCP_USER_TIMEOUT on PostgreSQL sockets"
    )
    assert "_transport" in asyncpg.connection.Connection.__slots__, why


async def test_keepalives_are_set_on_a_connections_socket() -> None:
    """A stand-in connection over a real TCP socket gets every option."""
    server = await asyncio.start_server(_accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport, _ = await asyncio.get_running_loop().create_connection(
        asyncio.Protocol, "127.0.0.1", port
    )

    conn = types.SimpleNamespace(_transport=transport)
    config = DatabaseConfig(keepalive_idle=7, keepalive_interval=3, keepalive_count=4)
    try:
        assert set_keepalives(conn, config)
        sock = socket_of(conn)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 7
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 3
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 4
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 5000
    finally:
        transport.close()
        server.close()
        await server.wait_closed()


async def _accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.close()
