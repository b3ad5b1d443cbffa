"""A TCP relay in front of PostgreSQL that can go silent, in one direction or both.

Silence holds bytes instead of dropping them: nothing is read from a silenced side until
the relay heals, as when a partition holds packets and TCP retransmits them afterwards. A
client that gave up meanwhile (and terminated its connection) never sees the answer; the
server still gets what was sent, late. ``answers_lost`` lets requests through and holds
the answers: the server commits, the client hears nothing (the commit whose outcome is
unknown). Connections accepted while silent are held before the server is even dialled.

It runs on the test's own event loop, so it stands for the network, not a real one: the
client's kernel acknowledges what it sends (TCP_USER_TIMEOUT never fires here); the
statement and connect deadlines must do the work. The netns scenario
(``database-partition``) drops real packets.
"""

from __future__ import annotations

import asyncio
import contextlib

from gateway.settings import DatabaseConfig

CHUNK = 65536  # bytes read at a time
#: Short deadlines for the stores behind a relay, so a test waits seconds, not five.
FAST = DatabaseConfig(timeout=1.0, connect_timeout=1.0)


class FaultRelay:
    """Relay ``127.0.0.1:port`` to ``upstream``; ``silence``, ``answers_lost``, ``heal``."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.accepted = 0  #: connections accepted so far
        self._to_server = asyncio.Event()  # set: bytes flow towards the server
        self._to_client = asyncio.Event()  # set: bytes flow towards the client
        self._to_server.set()
        self._to_client.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> int:
        """Listen on a free loopback port; return it."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def silence(self) -> None:
        """Hold everything, both ways, until ``heal``."""
        self._to_server.clear()
        self._to_client.clear()

    def answers_lost(self) -> None:
        """Let requests reach the server; hold its answers until ``heal``."""
        self._to_server.set()
        self._to_client.clear()

    def heal(self) -> None:
        """Let everything held go on, and what comes after."""
        self._to_server.set()
        self._to_client.set()

    def cut(self) -> None:
        """Close every relayed connection at once (a reset, not silence)."""
        for writer in list(self._writers):
            writer.transport.abort()

    async def close(self) -> None:
        """Stop listening and drop every connection."""
        self.heal()
        if self._server is not None:
            self._server.close()
        self.cut()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.add(writer)
        try:
            await self._to_server.wait()  # silent: not even the server is dialled
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except (OSError, asyncio.CancelledError):
            writer.transport.abort()
            self._writers.discard(writer)
            return
        self._writers.add(up_writer)
        pumps = {
            asyncio.ensure_future(self._pump(reader, up_writer, self._to_server)),
            asyncio.ensure_future(self._pump(up_reader, writer, self._to_client)),
        }
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            self._tasks.difference_update(pumps)
            for w in (writer, up_writer):
                w.transport.abort()
                self._writers.discard(w)

    @staticmethod
    async def _pump(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, flowing: asyncio.Event
    ) -> None:
        with contextlib.suppress(OSError):
            while True:
                await flowing.wait()
                data = await reader.read(CHUNK)
                if not data:
                    return
                await flowing.wait()  # read just before the silence: held, not sent
                writer.write(data)
                await writer.drain()
