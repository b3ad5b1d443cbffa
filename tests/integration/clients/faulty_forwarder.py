"""The button page's server (examples/button/serve.py) with network faults on demand.

Between a client and the gateway it can, per request, in the order a test scripts them:

- ``reset_before``: reset the connection without forwarding (the request never arrived);
- ``reset_after``: forward, let the gateway answer, then reset the connection (the
  request arrived and did its work, the answer was lost);
- ``unavailable``: answer 503 ``urn:onejob:unavailable`` with ``Retry-After`` (the
  database is away), without forwarding;
- ``hold``: forward, then hold the answer for ``hold_seconds`` before sending it (a slow
  network: long enough for a page to be reloaded meanwhile);
- ``cut_stream``: forward, relay an event stream until its first event with an id has
  passed whole, give the client ``CUT_GRACE`` to read it, then reset the connection (a
  reset at once can discard bytes the client's kernel has not handed over yet: the
  client would then never have seen the event it is meant to resume after).

``unavailable_for(seconds)`` answers every ``/v1`` request 503 for that long. Every
request that reaches it is recorded (method, path, Idempotency-Key, body, what was done).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import re
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_SERVE = Path(__file__).resolve().parents[3] / "examples/button/serve.py"
_spec = importlib.util.spec_from_file_location("button_serve", _SERVE)
assert _spec is not None and _spec.loader is not None
button_serve = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(button_serve)

RETRY_AFTER = 1  # seconds, in the injected 503s (what the gateway itself sends)
CUT_GRACE = 0.5  # seconds between relaying the event to resume after and the reset
_EVENT_WITH_ID = re.compile(rb"(?:^|\n)id:[^\n]*\n(?:[^\n]+\n)*\n")


def first_event_with_id(stream: bytes) -> bool:
    """Say whether ``stream`` holds a whole event (ended by a blank line) with an id."""
    lines = stream.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return _EVENT_WITH_ID.search(lines) is not None


@dataclasses.dataclass
class Seen:
    """One request that reached the forwarder, and what it did with it (recorded when it
    arrives; ``status`` is set once the answer was sent)."""

    method: str
    path: str
    key: str | None  #: the Idempotency-Key header as sent
    last_event_id: str | None  #: the Last-Event-ID header as sent
    body: bytes
    done: str  #: ``forwarded``, ``reset_before``, ``reset_after``, ``unavailable``, ``hold``
    status: int | None  #: the status the client got, None when the connection was reset
    at: float  #: monotonic seconds


class Faults:
    """What the forwarder does to the next requests (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scripts: dict[tuple[str, str], deque[str]] = {}
        self._unavailable_until = 0.0
        self.hold_seconds = 3.0
        self.seen: list[Seen] = []

    def script(self, method: str, path: str, *actions: str) -> None:
        """Do ``actions`` to the next requests ``method path``, one each, in order."""
        with self._lock:
            self._scripts.setdefault((method, path), deque()).extend(actions)

    def unavailable_for(self, seconds: float) -> None:
        """Answer every ``/v1`` request 503 for ``seconds`` from now."""
        with self._lock:
            self._unavailable_until = time.monotonic() + seconds

    def take(self, method: str, path: str) -> str:
        with self._lock:
            if time.monotonic() < self._unavailable_until:
                return "unavailable"
            queue = self._scripts.get((method, path.split("?", 1)[0]))
            return queue.popleft() if queue else "forwarded"

    def record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def requests(self, method: str, path: str) -> list[Seen]:
        """Return the requests ``method path`` seen so far."""
        with self._lock:
            return [s for s in self.seen if s.method == method and s.path == path]


class FaultyForwarder(button_serve.Forwarder):  # type: ignore[misc,name-defined]
    """The page's forwarder, doing to each ``/v1`` request what ``Faults`` says."""

    server: FaultyServer

    def forward(self, body: bytes | None = None) -> int:
        body = self.read_body() if body is None else body
        faults = self.server.faults
        action = faults.take(self.command, self.path)
        seen = Seen(
            self.command,
            self.path,
            self.headers.get("Idempotency-Key"),
            self.headers.get("Last-Event-ID"),
            body,
            action,
            None,
            time.monotonic(),
        )
        faults.record(seen)
        if action == "reset_before":
            self.reset()
        elif action == "unavailable":
            seen.status = self.send_unavailable()
        elif action == "reset_after":
            with contextlib.closing(self.upstream(body)) as response:
                response.read()
            self.reset()
        elif action == "cut_stream":
            with contextlib.closing(self.upstream(body)) as response:
                seen.status = response.status_code
                self.send_response(response.status_code)
                for name, value in response.headers.multi_items():
                    if name.lower() not in button_serve.HOP_BY_HOP:
                        self.send_header(name, value)
                self.end_headers()
                relayed = b""
                for chunk in response.iter_bytes():
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    relayed += chunk
                    if first_event_with_id(relayed):
                        break
                time.sleep(CUT_GRACE)
            self.reset()
        elif action == "hold":
            with contextlib.closing(self.upstream(body)) as response:
                response.read()
                time.sleep(faults.hold_seconds)
                seen.status = response.status_code
                with contextlib.suppress(OSError):  # the page may be gone by now
                    self.relay(response)
        else:
            seen.status = super().forward(body)
        return seen.status or 0

    def reset(self) -> None:
        """Close the connection with a TCP RST, as a dropped network would."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    def send_unavailable(self) -> int:
        body = json.dumps(
            {
                "type": "urn:onejob:unavailable",
                "title": "Unavailable",
                "status": 503,
                "detail": "The database is not reachable (injected by the test).",
                "outcome": "not_done",
            }
        ).encode()
        self.send_response(503)
        self.send_header("Content-Type", "application/problem+json")
        self.send_header("Retry-After", str(RETRY_AFTER))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return 503


class FaultyServer(button_serve.ButtonServer):  # type: ignore[misc,name-defined]
    """``ButtonServer`` with ``faults``."""

    def __init__(self, gateway: str, api_key: str | None) -> None:
        super().__init__(("127.0.0.1", 0), gateway, api_key, FaultyForwarder)
        self.faults = Faults()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet about clients that went away (a reload, a reset we made)."""


@contextlib.contextmanager
def serving(gateway: str, api_key: str | None) -> Iterator[FaultyServer]:
    """Serve a ``FaultyServer`` on a free loopback port in a thread, for the block."""
    server = FaultyServer(gateway, api_key)
    thread = threading.Thread(target=server.serve_forever, name="faulty-forwarder", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
