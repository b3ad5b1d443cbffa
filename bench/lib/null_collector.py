"""A loopback OTLP/HTTP collector that keeps nothing: it answers every ``POST /v1/traces``
with 200 and counts the requests and bytes, so a gateway's exporter pays what it pays
with a real collector nearby (encoding, the POST) and the collector's own work is not on
the gateway's CPU."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Collected:
    """What the collector was sent."""

    url: str
    posts: int = 0
    bytes: int = 0


@contextlib.contextmanager
def null_collector() -> Iterator[Collected]:
    """Serve the collector on a free loopback port for the block."""
    lock = threading.Lock()
    holder: list[Collected] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a collector would

        def do_POST(self) -> None:
            size = int(self.headers.get("content-length", "0"))
            self.rfile.read(size)
            with lock:
                holder[0].posts += 1
                holder[0].bytes += size
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder.append(Collected(f"http://127.0.0.1:{server.server_address[1]}"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
