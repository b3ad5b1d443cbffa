"""Side by side: which HTTP server gives the gateway its edge refusals, and at what speed.

``python -m bench.servers [--duration 8] [--connections 16] [--only NAME,...]``
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

Against each, over raw sockets (``bench.lib.http_probes``): ``Content-Length`` with
``Transfer-Encoding: chunked`` (both orders) on a POST with a second request pipelined
behind it (pass: one 400, the connection closed, the second request never answered); a
partial header block held open, silent and trickled a header line a second (pass: cut
within 15 s; when and with what status); 101 header fields and a 20 KiB header (pass:
refused with a 4xx); a body one byte over ``max_body_bytes``, with ``Content-Length`` and
chunked (pass: 413). Then ``wrk``: job creation (``POST /v1/jobs``, a fresh
``Idempotency-Key`` per request) and ``GET /healthz``, ``--connections`` for
``--duration`` seconds each, with the server's CPU time per answer. It prints two tables
and writes ``reports/out/servers.json``. It is a measurement, not a test: nothing here
fails the run but a server that never serves.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.lib import wrk
from bench.lib.children import ROOT, free_port, ready, say
from bench.lib.gateways import GATEWAY_MODULE, gateway_settings
from bench.lib.http_probes import PROBE_TITLES, SLOW_LISTEN_S, run_probes
from bench.lib.loads import CONTRACT, INPUT
from bench.lib.measure import measure
from bench.lib.report import commit, write_report
from bench.lib.server_venv import ensure_venv, versions
from bench.lib.wrk import run_wrk
from gateway.server import SETTINGS_ENV
from gateway.settings import Settings

HEADER_TIMEOUT_S = 10  # what the edge does; the peers are given the same where they can
HEADER_BYTES = 16 * 1024
EXIT_TIMEOUT = 20.0  # seconds for a server to stop after SIGTERM
NOWHERE = "http://127.0.0.1:9"  # the route's provider: never called, the dispatcher is off


# -- the servers ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    """One way to serve the app: a title and the command for a port."""

    name: str
    title: str
    command: Callable[[Path, int, Path, Path], list[str]]  # (venv bin, port, settings, work)


def _uvicorn_edge(bin_dir: Path, port: int, settings: Path, work: Path) -> list[str]:
    # gateway_from_settings runs gateway.server.serve: what `onejob serve` runs, as given.
    return [
        str(bin_dir / "python"),
        "-m",
        GATEWAY_MODULE,
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
        create = wrk.write(work / "create.lua", wrk.create_jobs(key, body, wait=None))
        health = wrk.write(work / "healthz.lua", wrk.get_ok("/healthz", '"status":"ok"'))
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
        "command": " ".join(["python -m bench.servers", *args.argv]),
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
        prog="python -m bench.servers",
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
