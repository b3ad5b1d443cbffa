"""TCP forwards from a veth address to loopback services, run on a thread of their own.

A forward accepts on ``listen_host:listen_port`` and relays each connection, byte for
byte and half-close for half-close, to ``upstream_host:upstream_port``. It never closes a
connection on a timer of its own: a silent downstream stays open (and silent) until its
upstream closes or the forwarder is closed, so a DROP on the veth is the only thing the
far side sees.

A forward can also hold back what its upstream sends (``Forward.delay``): every chunk is
written downstream ``delay`` seconds after it arrived, in order, without slowing the
reading, so each request/response round trip grows by ``delay``. This stands in for
``tc netem``, which kernels built without ``CONFIG_NET_SCH_NETEM`` lack.

The forwards run on their own event loop in a daemon thread: a scenario's loop busy with
load does not delay the database's bytes (the GIL is still shared).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

UPSTREAM_CONNECT_TIMEOUT = 5.0  # seconds to reach a loopback service before the relay gives up
CHUNK = 65536  # bytes read at a time
QUEUE_CHUNKS = 64  # chunks held back at most; past it the upstream feels TCP backpressure
STOP_TIMEOUT = 5.0  # seconds the thread may take to wind down

T = TypeVar("T")


class ForwarderError(Exception):
    """The forwarder's thread did not start or did not answer."""


@dataclasses.dataclass(slots=True)
class Forward:
    """One listening forward and what went through it."""

    target: str  #: what the forward stands for ("database", "provider")
    host: str  #: the address clients in the namespace connect to
    port: int  #: the port clients in the namespace connect to
    upstream_host: str
    upstream_port: int
    accepted: int = 0  #: connections accepted so far
    open: int = 0  #: connections relaying right now
    delay: float = 0.0  # seconds every chunk from upstream is held back; set from any thread

    @property
    def address(self) -> str:
        """Return ``host:port`` as a client dials it."""
        return f"{self.host}:{self.port}"


class Forwarder:
    """Own an event loop thread and the TCP forwards it serves."""

    def __init__(self, name: str) -> None:
        self.forwards: list[Forward] = []
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None  # made with the thread, on first use
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def _call(self, coro: Coroutine[Any, Any, T], timeout: float = STOP_TIMEOUT) -> T:
        """Run ``coro`` on the forwarder's loop and wait for its result."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(
                target=self._loop.run_forever, name=self._name, daemon=True
            )
            self._thread.start()
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except TimeoutError:
            future.cancel()
            raise ForwarderError(f"the forwarder's thread did not answer in {timeout} s") from None

    async def add(
        self, target: str, listen_host: str, listen_port: int, upstream: tuple[str, int]
    ) -> Forward:
        """Listen on ``listen_host:listen_port`` (0: any free port) and relay to ``upstream``."""
        return await self._call(self._listen(target, listen_host, listen_port, upstream))

    async def _listen(
        self, target: str, listen_host: str, listen_port: int, upstream: tuple[str, int]
    ) -> Forward:
        forward = Forward(target, listen_host, 0, *upstream)

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            # Closing the forwarder cancels its relays: that is their end, not an error
            # (asyncio's server would print each cancelled handler's traceback).
            with contextlib.suppress(asyncio.CancelledError):
                await self._relay(forward, reader, writer)

        server = await asyncio.start_server(handle, listen_host, listen_port)
        forward.port = server.sockets[0].getsockname()[1]
        self._servers.append(server)
        self.forwards.append(forward)
        return forward

    async def _relay(
        self, forward: Forward, down_r: asyncio.StreamReader, down_w: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        forward.accepted += 1
        try:
            up_r, up_w = await asyncio.wait_for(
                asyncio.open_connection(forward.upstream_host, forward.upstream_port),
                UPSTREAM_CONNECT_TIMEOUT,
            )
        except (OSError, TimeoutError):
            down_w.transport.abort()  # as a refused connection would look, seen from afar
            self._tasks.discard(task)
            return
        self._writers.update((down_w, up_w))
        forward.open += 1
        try:
            await asyncio.gather(
                self._pump(down_r, up_w, down_w), self._delayed_pump(forward, up_r, down_w, up_w)
            )
        finally:
            forward.open -= 1
            for writer in (down_w, up_w):
                writer.close()
                self._writers.discard(writer)
            self._tasks.discard(task)

    @staticmethod
    async def _pump(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, source: asyncio.StreamWriter
    ) -> None:
        """Copy one direction; pass a FIN on as a FIN and a reset on as a reset."""
        try:
            while chunk := await reader.read(CHUNK):
                writer.write(chunk)
                await writer.drain()
            if writer.can_write_eof() and not writer.is_closing():
                writer.write_eof()
        except OSError:
            source.transport.abort()
            writer.transport.abort()

    @classmethod
    async def _delayed_pump(
        cls,
        forward: Forward,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        source: asyncio.StreamWriter,
    ) -> None:
        """Copy one direction, writing each chunk (and the FIN) ``forward.delay`` after it came."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(QUEUE_CHUNKS)

        async def read() -> None:
            try:
                while chunk := await reader.read(CHUNK):
                    await queue.put((time.monotonic() + forward.delay, chunk))
            except OSError:
                source.transport.abort()
                writer.transport.abort()
            await queue.put((time.monotonic() + forward.delay, b""))

        reading = asyncio.ensure_future(read())
        try:
            while True:
                due, chunk = await queue.get()
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                if not chunk:
                    break
                writer.write(chunk)
                await writer.drain()
            if writer.can_write_eof() and not writer.is_closing():
                writer.write_eof()
        except OSError:
            source.transport.abort()
            writer.transport.abort()
        finally:
            reading.cancel()

    async def _shutdown(self) -> None:
        for server in self._servers:
            server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(
                asyncio.gather(*self._tasks, return_exceptions=True), STOP_TIMEOUT / 2
            )
        self._servers.clear()

    async def close(self) -> None:
        """Stop listening, reset every relayed connection and stop the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or loop.is_closed():
            return
        if thread.is_alive():
            with contextlib.suppress(ForwarderError):
                await self._call(self._shutdown())
            loop.call_soon_threadsafe(loop.stop)
            await asyncio.to_thread(thread.join, STOP_TIMEOUT)
        if not thread.is_alive():
            loop.close()
