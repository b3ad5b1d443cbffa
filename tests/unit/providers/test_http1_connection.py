"""``Http1Connection``, driven by hand where a real socket cannot time it.

The break points a socket can reach are in
tests/integration/providers/test_network_backend.py, against httpcore.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import httpx

from providers.http1_connection import Http1Connection


class _FullSocket:
    """A transport whose socket takes nothing: every write pauses the protocol; ``abort``
    reports the loss a turn later, as asyncio's transports do."""

    def __init__(self, protocol: Http1Connection, loop: asyncio.AbstractEventLoop) -> None:
        self.protocol, self.loop = protocol, loop

    def write(self, data: bytes) -> None:
        self.protocol.pause_writing()

    def abort(self) -> None:
        self.loop.call_soon(self.protocol.connection_lost, None)

    def get_extra_info(self, name: str) -> Any:
        return None


def test_an_answer_failed_while_its_upload_waited_leaves_no_unread_exception() -> None:
    """The server answers garbage while the upload waits for the socket, and the call is
    given up in the same turn: the answer's exception must be read, not left for the
    garbage collector to log as "never retrieved"."""
    unhandled: list[dict[str, Any]] = []

    async def body() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
        conn = Http1Connection(loop, ("http", "provider.example", 80))
        conn.connection_made(_FullSocket(conn, loop))  # type: ignore[arg-type]
        request = httpx.Request("POST", "http://provider.example/", content=b"x" * 100)
        timeouts = {"write": 5.0, "read": 5.0}
        call = asyncio.create_task(conn.exchange(request, b"", request.content, timeouts))
        await asyncio.sleep(0)  # the upload now waits for the socket
        conn.data_received(b"NOT HTTP\r\n\r\n")  # fails the answer
        call.cancel()  # the adapters' deadline, in the same turn
        try:
            await call
        except asyncio.CancelledError:
            pass
        del call, conn
        await asyncio.sleep(0.01)  # the reported loss runs, dropping the last reference
        gc.collect()

    asyncio.run(body())
    assert not [c for c in unhandled if "never retrieved" in str(c.get("message"))]
