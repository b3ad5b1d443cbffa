"""A zero-latency OpenAI-shaped upstream for benchmarks: one canned Chat Completions answer.

``python -m bench.processes.upstream --port P`` answers every ``POST`` with a
``chat.completion`` whose content is a valid ``ticket-triage@1`` result, over HTTP/1.1
keep-alive, straight from an ``asyncio.Protocol``: no framework, no parsing beyond the
headers and the body length. It exists so the benchmark measures the gateway, not the
simulator (which renders each answer from its input and checks request rules).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys

ANSWER = {
    "category": "billing",
    "priority": "high",
    "summary": "Billing ticket: charged twice",
    "needs_human": True,
    "language": "en",
}
BODY = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "bench-gpt",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": json.dumps(ANSWER), "refusal": None},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 30, "total_tokens": 130},
    }
).encode()
RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-request-id: req-bench\r\n"
    b"content-length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY
)


class Upstream(asyncio.Protocol):
    """Answer each complete request on the connection with ``RESPONSE``."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Remember the transport."""
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        """Answer every request that is complete in the buffer."""
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            length = 0
            for line in bytes(self.buffer[:end]).split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            del self.buffer[: end + 4 + length]
            assert self.transport is not None
            self.transport.write(RESPONSE)


async def serve(host: str, port: int) -> None:
    """Serve until SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Upstream, host, port, backlog=1024)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"upstream listening on http://{host}:{port}", file=sys.stderr, flush=True)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and serve."""
    parser = argparse.ArgumentParser(prog="python -m bench.processes.upstream")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
