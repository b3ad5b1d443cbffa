"""``OneWritePerTurn``: what a loop turn wrote goes out at its end, as one write, in order."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.http.edge import OneWritePerTurn


class Wire:
    """A transport that records its writes."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.extra = {"peername": ("127.0.0.1", 1)}

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str) -> Any:
        return self.extra.get(name)


def held(wire: Wire) -> OneWritePerTurn:
    return OneWritePerTurn(wire, asyncio.get_running_loop())  # type: ignore[arg-type]


async def test_a_head_and_body_written_in_one_turn_go_as_one_write_at_its_end() -> None:
    wire = Wire()
    transport = held(wire)
    transport.write(b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n")
    transport.write(bytearray(b"{}"))
    assert wire.writes == []  # nothing sent mid-turn
    await asyncio.sleep(0)
    assert wire.writes == [b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}"]


async def test_pieces_written_in_later_turns_go_in_order_one_turn_later_at_most() -> None:
    wire = Wire()
    transport = held(wire)
    for piece in (b"a", b"b", b"c"):
        transport.write(piece)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    assert wire.writes == [b"a", b"b", b"c"]


async def test_close_sends_what_is_held_first_and_a_closed_wire_gets_nothing() -> None:
    wire = Wire()
    transport = held(wire)
    transport.write(b"HTTP/1.1 408 Request Timeout\r\n\r\n")
    transport.close()
    assert wire.writes == [b"HTTP/1.1 408 Request Timeout\r\n\r\n"] and wire.closed
    transport.write(b"late")
    await asyncio.sleep(0)
    assert wire.writes == [b"HTTP/1.1 408 Request Timeout\r\n\r\n"]


async def test_a_reused_buffer_does_not_change_what_was_written() -> None:
    wire = Wire()
    transport = held(wire)
    buffer = bytearray(b"first")
    transport.write(buffer)
    buffer[:] = b"other"
    await asyncio.sleep(0)
    assert wire.writes == [b"first"]


async def test_everything_else_is_the_transports() -> None:
    wire = Wire()
    assert held(wire).get_extra_info("peername") == ("127.0.0.1", 1)
