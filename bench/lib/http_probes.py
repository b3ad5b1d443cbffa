"""Raw-socket probes of an HTTP/1.1 server's edge: smuggling, slow and large heads, large
bodies.

Each probe opens its own connection, sends bytes at given offsets while reading what
comes back, and judges the conversation: the statuses in order (split by their framing,
not by lines), whether and when the connection closed. ``bench.servers`` runs them
against every server it compares.
"""

from __future__ import annotations

import json
import re
import select
import socket
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.lib.loads import CONTRACT, INPUT

SLOW_LISTEN_S = 15.0  # a partial header block still open after this is "held open"
QUICK_LISTEN_S = 5.0  # a quick probe's whole conversation, at most
QUIET_S = 1.0  # after an answer, this long with nothing more ends a quick probe
TRICKLE_EVERY_S = 1.0
RECEIVED_KEPT = 2000  # bytes of a conversation's answers kept in the report
#: The app writes its problem documents as compact JSON with this type; the parsers' own
#: 400s (uvicorn's, hyper's, h11's) are plain text or empty.
APP_PROBLEM = '"type":"urn:onejob:'


@dataclass
class Conversation:
    """What one connection was answered: statuses in order, and whether and when it closed."""

    statuses: list[int] = field(default_factory=list)
    closed_after_s: float | None = None  # None: still open when the probe stopped listening
    reset: bool = False  # closed with a RST rather than a FIN
    first_answer_after_s: float | None = None
    listened_s: float = 0.0
    head: str = ""  # the first answer's status line and the start of its body
    received: str = ""  # everything answered (its start), for the report


_STATUS_LINE = re.compile(rb"HTTP/1\.[01] (\d{3})")


def statuses_of(data: bytes) -> list[int]:
    """Return the status of every whole or started response in ``data``, in order.

    Responses are split by their framing (``Content-Length`` or chunked), not by lines: a
    pipelined answer can follow a body with no line break between them.
    """
    found: list[int] = []
    rest = data
    while rest:
        head, sep, after = rest.partition(b"\r\n\r\n")
        match = _STATUS_LINE.match(head)
        if match is None:
            break
        found.append(int(match.group(1)))
        if not sep:
            break
        fields = dict(
            (name.strip().lower(), value.strip())
            for name, _, value in (line.partition(b":") for line in head.split(b"\r\n")[1:])
        )
        if b"chunked" in fields.get(b"transfer-encoding", b"").lower():
            rest = _after_chunks(after)
        elif b"content-length" in fields:
            rest = after[int(fields[b"content-length"]) :]
        else:
            break  # the body runs to the close
    return found


def _after_chunks(data: bytes) -> bytes:
    """Return what follows a chunked body (empty while it is incomplete)."""
    while True:
        size_line, sep, data = data.partition(b"\r\n")
        if not sep:
            return b""
        try:
            size = int(size_line.split(b";", 1)[0], 16)
        except ValueError:
            return b""  # not chunk framing: stop splitting here
        if size == 0:
            return data.partition(b"\r\n")[2]  # after the (empty) trailer section
        data = data[size + 2 :]


def converse(
    port: int, steps: Sequence[tuple[float, bytes]], *, listen: float, quiet: float | None
) -> Conversation:
    """Send each step's bytes at its offset (seconds from connecting) while reading answers.

    Stops when the server closes, after ``listen`` seconds, or (``quiet``) when an answer
    has come and nothing more for that long. Reading and writing are interleaved, so an
    answer written before the server stops reading a large body is still seen.
    """
    conv = Conversation()
    received = bytearray()
    pending = [(at, bytearray(data)) for at, data in steps]
    began = time.monotonic()
    last_byte = began
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.setblocking(False)
        while True:
            now = time.monotonic()
            elapsed = now - began
            if elapsed >= listen or (
                quiet is not None and conv.statuses and now - last_byte >= quiet
            ):
                break
            due = bool(pending) and pending[0][0] <= elapsed
            wait = min(0.05, listen - elapsed)
            readable, writable, _ = select.select([sock], [sock] if due else [], [], wait)
            if readable:
                try:
                    chunk = sock.recv(65536)
                except ConnectionResetError:
                    conv.reset, chunk = True, b""
                if not chunk:
                    conv.closed_after_s = round(time.monotonic() - began, 2)
                    break
                if not received:
                    conv.first_answer_after_s = round(time.monotonic() - began, 2)
                received += chunk
                last_byte = time.monotonic()
                conv.statuses = statuses_of(bytes(received))
            if writable and pending:
                try:
                    sent = sock.send(pending[0][1][:65536])
                except (BrokenPipeError, ConnectionResetError):
                    pending.clear()  # it stopped reading; what it answers is still read
                    continue
                del pending[0][1][:sent]
                if not pending[0][1]:
                    pending.pop(0)
    conv.listened_s = round(time.monotonic() - began, 2)
    first = bytes(received).split(b"\r\n\r\n", 1)
    status_line = first[0].split(b"\r\n", 1)[0].decode("latin-1")
    body = first[1][:120].decode("latin-1") if len(first) > 1 else ""
    conv.head = f"{status_line} {body}".strip()
    conv.received = bytes(received[:RECEIVED_KEPT]).decode("latin-1")
    return conv


@dataclass
class Probe:
    """One probe's verdict: pass or not, and what was answered, in words."""

    name: str
    passed: bool
    answered: str
    conversation: dict[str, Any]


def _request(method: str, target: str, headers: Sequence[str], body: bytes = b"") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _closed(conv: Conversation) -> str:
    if conv.closed_after_s is None:
        return f"still open after {conv.listened_s:g} s"
    return f"closed{' (reset)' if conv.reset else ''} after {conv.closed_after_s:g} s"


def _statuses(conv: Conversation) -> str:
    return ", ".join(map(str, conv.statuses)) or "no answer"


def probe_smuggling(port: int, key: str, *, te_first: bool) -> Probe:
    """CL and TE on one POST, a GET pipelined behind: one 400, closed, the GET unanswered."""
    # Read as chunked, the body is a valid job (201 from the app); read by its length, the
    # app gets 4 bytes of chunk framing (a 400 of the app's). Only a refusal by the server
    # itself is one 400 that is not one of the app's problem documents.
    job = json.dumps({"contract": CONTRACT, "input": INPUT}).encode()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(job), job)
    framing = ["Content-Length: 4", "Transfer-Encoding: chunked"]
    if te_first:
        framing.reverse()
    post = _request(
        "POST",
        "/v1/jobs",
        [
            f"Authorization: Bearer {key}",
            "Content-Type: application/json",
            f"Idempotency-Key: smuggle-{'te' if te_first else 'cl'}-{port}",
            *framing,
        ],
        chunked,
    )
    smuggled = _request("GET", "/healthz", [])
    conv = converse(port, [(0.0, post + smuggled)], listen=QUICK_LISTEN_S, quiet=QUIET_S)
    by_app = APP_PROBLEM in conv.received
    passed = conv.statuses == [400] and conv.closed_after_s is not None and not by_app
    answered = f"{_statuses(conv)}{' from the app' if by_app else ''}; {_closed(conv)}"
    return Probe("te_cl" if te_first else "cl_te", passed, answered, asdict(conv))


def probe_slow_headers(port: int, *, trickle: bool) -> Probe:
    """A header block that never ends: silent, or a new header line every second."""
    start = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow-0: 1\r\n"
    steps = [(0.0, start)]
    if trickle:
        count = int(SLOW_LISTEN_S / TRICKLE_EVERY_S)
        steps += [(n * TRICKLE_EVERY_S, b"X-Slow-%d: 1\r\n" % n) for n in range(1, count)]
    conv = converse(port, steps, listen=SLOW_LISTEN_S, quiet=None)
    passed = conv.closed_after_s is not None
    if passed:
        answered = f"cut after {conv.closed_after_s:g} s with {_statuses(conv)}"
    else:
        answered = f"held open > {SLOW_LISTEN_S:g} s ({_statuses(conv)})"
    return Probe("slow_trickled" if trickle else "slow_silent", passed, answered, asdict(conv))


def probe_many_headers(port: int) -> Probe:
    """101 header fields (Host and 100 more): refused with a 4xx."""
    headers = [f"X-Pad-{n}: {n}" for n in range(100)]
    conv = converse(port, [(0.0, _request("GET", "/healthz", headers))], **_quick())
    return _refused("headers_101", conv)


def probe_large_header(port: int) -> Probe:
    """One 20 KiB header value: refused with a 4xx."""
    headers = ["X-Big: " + "a" * 20 * 1024]
    conv = converse(port, [(0.0, _request("GET", "/healthz", headers))], **_quick())
    return _refused("header_20k", conv)


def _quick() -> dict[str, Any]:
    return {"listen": QUICK_LISTEN_S, "quiet": QUIET_S}


def _refused(name: str, conv: Conversation) -> Probe:
    passed = bool(conv.statuses) and 400 <= conv.statuses[0] < 500
    return Probe(name, passed, f"{_statuses(conv)}; {_closed(conv)}", asdict(conv))


def probe_large_body(port: int, key: str, limit: int, *, chunked: bool) -> Probe:
    """A job one byte over the body limit, declared or chunked: 413."""
    pad = "a" * (limit + 1)
    body = json.dumps({"contract": CONTRACT, "input": {"pad": pad}}).encode()[: limit + 1]
    headers = [
        f"Authorization: Bearer {key}",
        "Content-Type: application/json",
        f"Idempotency-Key: over-{'chunked' if chunked else 'length'}-{port}",
    ]
    if chunked:
        headers.append("Transfer-Encoding: chunked")
        step = 64 * 1024
        payload = b"".join(
            b"%x\r\n%s\r\n" % (len(body[i : i + step]), body[i : i + step])
            for i in range(0, len(body), step)
        )
        payload += b"0\r\n\r\n"
    else:
        headers.append(f"Content-Length: {len(body)}")
        payload = body
    conv = converse(port, [(0.0, _request("POST", "/v1/jobs", headers, payload))], **_quick())
    passed = bool(conv.statuses) and conv.statuses[0] == 413
    name = "body_over_chunked" if chunked else "body_over_length"
    return Probe(name, passed, f"{_statuses(conv)}; {_closed(conv)}", asdict(conv))


PROBE_TITLES = {
    "cl_te": "CL+TE, GET pipelined",
    "te_cl": "TE+CL, GET pipelined",
    "slow_silent": "partial headers, silent",
    "slow_trickled": "partial headers, 1 line/s",
    "headers_101": "101 header fields",
    "header_20k": "one 20 KiB header",
    "body_over_length": "body > limit, Content-Length",
    "body_over_chunked": "body > limit, chunked",
}


def run_probes(port: int, key: str, limit: int) -> dict[str, Probe]:
    """Run every probe; the two slow ones side by side, each on its own connection."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2) as pool:
        slow = [pool.submit(probe_slow_headers, port, trickle=t) for t in (False, True)]
        quick = [
            probe_smuggling(port, key, te_first=False),
            probe_smuggling(port, key, te_first=True),
            probe_many_headers(port),
            probe_large_header(port),
            probe_large_body(port, key, limit, chunked=False),
            probe_large_body(port, key, limit, chunked=True),
        ]
        probes = quick + [f.result() for f in slow]
    return {p.name: p for p in sorted(probes, key=lambda p: list(PROBE_TITLES).index(p.name))}
