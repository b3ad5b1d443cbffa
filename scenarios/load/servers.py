"""Side by side: which HTTP server gives the gateway its edge refusals, and at what speed.

``python -m scenarios.load.servers [--duration 8] [--connections 16] [--only NAME,...]``
serves the same gateway app (SQLite in a temporary directory, dispatcher and bundled
simulator off) behind four servers, one after the other, in one run:

- ``uvicorn+edge``: what ``onejob serve`` runs (``gateway.server.serve``: uvicorn with
  httptools and ``gateway.http.edge.EdgeProtocol``);
- ``uvicorn``: uvicorn with plain httptools, the same app (``gateway.server:worker_app``);
- ``granian``: its ASGI interface, 1 worker, HTTP/1 only, with its own header read timeout
  (``--http1-header-read-timeout``, 10 s like the edge's) and its HTTP/1 buffer at the
  edge's 16 KiB (``--http1-buffer-size``: hyper refuses a head that outgrows the buffer);
- ``hypercorn``: h11, with ``h11_max_incomplete_size`` (16 KiB, its default) and
  ``read_timeout`` 10 s (off by default), uvloop worker.

Every server runs from one virtualenv, ``.peers/servers`` (built on the first run with the
pinned granian and hypercorn and this repository installed editable, reused after), so the
app, its dependencies and the event loop are the same and only the server differs.

Against each, over raw sockets: ``Content-Length`` with ``Transfer-Encoding: chunked``
(both orders) on a POST with a second request pipelined behind it (pass: one 400, the
connection closed, the second request never answered); a partial header block held open,
silent and trickled a header line a second (pass: cut within 15 s; when and with what
status); 101 header fields and a 20 KiB header (pass: refused with a 4xx); a body one byte
over ``max_body_bytes``, with ``Content-Length`` and chunked (pass: 413). Then ``wrk``:
job creation (``POST /v1/jobs``, a fresh ``Idempotency-Key`` per request) and
``GET /healthz``, ``--connections`` for ``--duration`` seconds each, with the server's CPU
time per answer. It prints two tables and writes ``reports/out/servers.json``. It is a
measurement, not a test: nothing here fails the run but a server that never serves.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gateway.server import SETTINGS_ENV
from gateway.settings import Settings
from scenarios.load import wrk_scripts
from scenarios.load.bench import free_port, ready, say, write_report
from scenarios.load.compare import CONTRACT, INPUT, commit, gateway_settings, measure, run_wrk

ROOT = Path(__file__).resolve().parents[2]
PEER_VENV = ROOT / ".peers" / "servers"
#: The servers under test, pinned: a later release may change what is measured here.
PINS = {"granian": "2.8.9", "hypercorn": "0.18.0"}
VERSIONS_OF = ("uvicorn", "httptools", "uvloop", "granian", "hypercorn", "h11", "litestar")
HEADER_TIMEOUT_S = 10  # what the edge does; the peers are given the same where they can
HEADER_BYTES = 16 * 1024
SLOW_LISTEN_S = 15.0  # a partial header block still open after this is "held open"
QUICK_LISTEN_S = 5.0  # a quick probe's whole conversation, at most
QUIET_S = 1.0  # after an answer, this long with nothing more ends a quick probe
TRICKLE_EVERY_S = 1.0
EXIT_TIMEOUT = 20.0  # seconds for a server to stop after SIGTERM
RECEIVED_KEPT = 2000  # bytes of a conversation's answers kept in the report
#: The app writes its problem documents as compact JSON with this type; the parsers' own
#: 400s (uvicorn's, hyper's, h11's) are plain text or empty.
APP_PROBLEM = '"type":"urn:onejob:'
NOWHERE = "http://127.0.0.1:9"  # the route's provider: never called, the dispatcher is off


# -- the servers ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    """One way to serve the app: a title and the command for a port."""

    name: str
    title: str
    command: Callable[[Path, int, Path, Path], list[str]]  # (venv bin, port, settings, work)


def _uvicorn_edge(bin_dir: Path, port: int, settings: Path, work: Path) -> list[str]:
    # gateway_proc runs gateway.server.serve: what `onejob serve` runs, settings as given.
    return [
        str(bin_dir / "python"),
        "-m",
        "scenarios.load.gateway_proc",
        "--settings",
        str(settings),
    ]


def _uvicorn_plain(bin_dir: Path, port: int, settings: Path, work: Path) -> list[str]:
    return [
        str(bin_dir / "python"),
        "-m",
        "uvicorn",
        "gateway.server:worker_app",
        "--factory",
        "--host=127.0.0.1",
        f"--port={port}",
        "--http=httptools",
        "--loop=uvloop",
        "--lifespan=on",
        "--no-access-log",
        "--log-level=warning",
    ]


def _granian(bin_dir: Path, port: int, settings: Path, work: Path) -> list[str]:
    return [
        str(bin_dir / "granian"),
        "--interface=asgi",  # with lifespan (asginl has none: the store would never open)
        "--factory",
        "--host=127.0.0.1",
        f"--port={port}",
        "--workers=1",
        "--http=1",
        "--no-ws",
        "--loop=uvloop",
        f"--http1-header-read-timeout={HEADER_TIMEOUT_S * 1000}",  # milliseconds
        f"--http1-buffer-size={HEADER_BYTES}",  # the edge's header bytes; default 417792
        "--log-level=warning",
        "gateway.server:worker_app",
    ]


def _hypercorn(bin_dir: Path, port: int, settings: Path, work: Path) -> list[str]:
    config = work / f"hypercorn-{port}.toml"
    config.write_text(
        f'bind = ["127.0.0.1:{port}"]\n'
        'worker_class = "uvloop"\n'
        "workers = 1\n"
        f"h11_max_incomplete_size = {HEADER_BYTES}\n"  # its default, said aloud
        f"read_timeout = {HEADER_TIMEOUT_S}\n"  # seconds per socket read; off by default
        "keep_alive_timeout = 5\n"  # its default
        'loglevel = "WARNING"\n',
        encoding="utf-8",
    )
    # hypercorn evaluates what follows the colon: a call builds the app from the factory.
    return [str(bin_dir / "hypercorn"), "--config", str(config), "gateway.server:worker_app()"]


SERVERS = (
    Server("uvicorn+edge", "uvicorn + httptools + EdgeProtocol (onejob serve)", _uvicorn_edge),
    Server("uvicorn", "uvicorn + httptools, plain", _uvicorn_plain),
    Server("granian", "granian, ASGI, 1 worker, HTTP/1", _granian),
    Server("hypercorn", "hypercorn, h11, uvloop worker", _hypercorn),
)


def ensure_venv() -> Path:
    """Build ``.peers/servers`` once (pinned peers, this repository editable); return its bin."""
    bin_dir = PEER_VENV / "bin"
    if _venv_ready(bin_dir):
        return bin_dir
    say(f"building {PEER_VENV.relative_to(ROOT)} (granian, hypercorn, onejob editable)")
    if not (bin_dir / "python").exists():
        # Not --system-site-packages: only what is installed here is importable there.
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
    pins = [f"{name}=={version}" for name, version in PINS.items()]
    subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "-q", "-e", str(ROOT), *pins],
        check=True,
        timeout=900,
    )
    if not _venv_ready(bin_dir):
        raise SystemExit(f"{PEER_VENV} was built but does not have the pinned servers")
    return bin_dir


def _venv_ready(bin_dir: Path) -> bool:
    """Whether the venv has the pinned servers and imports the gateway from this tree."""
    if not (bin_dir / "python").exists():
        return False
    check = (
        "import importlib.metadata as m, json, gateway;"
        f"print(json.dumps([{{n: m.version(n) for n in {list(PINS)!r}}}, gateway.__file__]))"
    )
    out = subprocess.run(
        [str(bin_dir / "python"), "-c", check], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        return False
    versions, where = json.loads(out.stdout)
    return bool(versions == PINS and Path(where).resolve().is_relative_to(ROOT))


def versions(bin_dir: Path) -> dict[str, str]:
    """Return the versions of the servers and of what they share, as installed there."""
    code = (
        "import importlib.metadata as m, json;"
        f"print(json.dumps({{n: m.version(n) for n in {list(VERSIONS_OF)!r}}}))"
    )
    out = subprocess.run([str(bin_dir / "python"), "-c", code], capture_output=True, text=True)
    loaded: dict[str, str] = json.loads(out.stdout)
    return loaded


@contextlib.contextmanager
def serving(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run one server in its own process group; SIGTERM it by PID, then kill what is left."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, **env},
            start_new_session=True,  # its workers are in its group, and go with it
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(EXIT_TIMEOUT)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the group this run started, nothing else
        proc.wait(EXIT_TIMEOUT)


# -- raw-socket probes ---------------------------------------------------------------------------


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


# -- the run -------------------------------------------------------------------------------------


def make_key(bin_dir: Path, url: str, work: Path) -> str:
    """Migrate and create an API key with ``onejob keys create``; return the key."""
    out = subprocess.run(
        [str(bin_dir / "onejob"), "keys", "create", "servers-bench", "--database-url", url],
        capture_output=True,
        text=True,
        cwd=work,  # no onejob.toml here: the built-in settings, with this database
        check=True,
        timeout=120,
    )
    return out.stdout.strip()


def run_server(
    server: Server, bin_dir: Path, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    """Serve the app behind one server on a fresh database; probe it, then load it."""
    out: dict[str, Any] = {"title": server.title}
    url = f"sqlite+aiosqlite:///{work / f'{server.name}.db'}"
    key = make_key(bin_dir, url, work)
    port = free_port()
    settings_file = gateway_settings(url, port, NOWHERE, dispatcher=False, runners=1, work=work)
    settings = Settings.model_validate_json(settings_file.read_text(encoding="utf-8"))
    argv = server.command(bin_dir, port, settings_file, work)
    out["command"] = [a.replace(str(ROOT) + "/", "") for a in argv]
    base = f"http://127.0.0.1:{port}"
    log = work / f"{server.name}.log"
    env = {SETTINGS_ENV: settings.model_dump_json(), "ONEJOB_LOG_LEVEL": "WARNING"}
    with serving(argv, env, log) as proc:
        asyncio.run(ready(f"{base}/healthz", proc, log))
        say(f"[{server.name}] probes (up to {SLOW_LISTEN_S:g} s)")
        probes = run_probes(port, key, settings.max_body_bytes)
        out["probes"] = {name: asdict(p) for name, p in probes.items()}
        for p in probes.values():
            say(f"  {'pass' if p.passed else 'FAIL'} {PROBE_TITLES[p.name]}: {p.answered}")
        if proc.poll() is not None:
            raise SystemExit(f"{server.name} died during the probes:\n{log.read_text()[-2000:]}")
        body = json.dumps({"contract": CONTRACT, "input": INPUT})
        create = wrk_scripts.write(
            work / "create.lua", wrk_scripts.create_jobs(key, body, wait=None)
        )
        health = wrk_scripts.write(
            work / "healthz.lua", wrk_scripts.get_ok("/healthz", '"status":"ok"')
        )
        run_wrk(base, create, connections=2, duration=2, prefix=f"warm-{server.name}")
        for name, script in (("create", create), ("healthz", health)):
            run = measure(
                base,
                script,
                connections=args.connections,
                duration=args.duration,
                prefix=f"{name}-{server.name}",
                pid=proc.pid,
            )
            out[name] = run
            say(
                f"  {name}: {run['rps']} req/s, p50 {run['p50_ms']} ms, p99 {run['p99_ms']} ms,"
                f" not as expected {run['bad'] + run['socket_errors']}"
            )
        out["log_tail"] = log.read_text(errors="replace")[-1500:]
    return out


def uptime() -> str:
    """Return ``uptime``'s line (the load average the run shared the machine with)."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Build the venv, then measure every server; return the report."""
    chosen = [s for s in SERVERS if not args.only or s.name in args.only.split(",")]
    bin_dir = ensure_venv()
    report: dict[str, Any] = {
        "commit": commit(),
        "command": " ".join(["python -m scenarios.load.servers", *args.argv]),
        "duration_s": args.duration,
        "connections": args.connections,
        "uptime_at_start": uptime(),
        "loadavg_at_start": os.getloadavg(),
        "versions": versions(bin_dir),
        "servers": {},
    }
    say(report["uptime_at_start"])
    with tempfile.TemporaryDirectory(prefix="onejob-servers-") as tmp:
        for server in chosen:
            say(f"[{server.name}] {server.title}")
            report["servers"][server.name] = run_server(server, bin_dir, args, Path(tmp))
    report["uptime_at_end"] = uptime()
    report["loadavg_at_end"] = os.getloadavg()
    return report


def table(report: dict[str, Any]) -> str:
    """Render the probes and the speed of every server as two Markdown tables."""
    names = list(report["servers"])
    lines = [
        f"commit {report['commit']}; load average at start"
        f" {report['loadavg_at_start'][0]:.2f}, at end {report['loadavg_at_end'][0]:.2f};"
        f" {report['command']}",
        "",
        "| probe | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for probe, title in PROBE_TITLES.items():
        cells = []
        for name in names:
            p = report["servers"][name]["probes"][probe]
            cells.append(f"{'pass' if p['passed'] else '**FAIL**'}: {p['answered']}")
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"| {report['connections']} connections, {report['duration_s']:g} s | "
        + " | ".join(names)
        + " |",
        "|---|" + "---|" * len(names),
    ]
    for load, title in (("create", "POST /v1/jobs"), ("healthz", "GET /healthz")):
        cells = []
        for name in names:
            r = report["servers"][name][load]
            bad = r["bad"] + r["socket_errors"]
            cells.append(
                f"{r['rps']:.0f} req/s, p50 {r['p50_ms']:.1f} / p99 {r['p99_ms']:.1f} ms,"
                f" {r['gateway_cpu_ms_per_request']:.2f} ms CPU"
                + (f", {bad} unexpected" if bad else "")
            )
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure, print the tables, write the JSON."""
    parser = argparse.ArgumentParser(
        prog="python -m scenarios.load.servers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per wrk run")
    parser.add_argument("--connections", type=int, default=16)
    names = ",".join(s.name for s in SERVERS)
    parser.add_argument("--only", help=f"a comma-separated subset of {names}")
    parser.add_argument("--out", default=str(ROOT / "reports/out/servers.json"))
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    report = run(args)
    print(table(report))
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
