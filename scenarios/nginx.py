"""A real nginx in front of gateways, and a slow TCP relay that makes one gateway lag."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import time
from pathlib import Path

from scenarios.harness import Harness, Process, free_port

NGINX_CANDIDATES = ("nginx", "/usr/sbin/nginx")


def nginx_binary() -> str | None:
    """Return the nginx executable, or None when it is not installed."""
    for candidate in NGINX_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    return None


def careless_config(prefix: Path, port: int, upstreams: list[int], read_timeout: float) -> str:
    """Render an nginx.conf that retries any request, POST included, on the next upstream."""
    servers = "\n".join(
        f"    server 127.0.0.1:{p} max_fails=0{' backup' if i else ''};"
        for i, p in enumerate(upstreams)
    )
    user = "user root;\n" if hasattr(os, "geteuid") and os.geteuid() == 0 else ""
    tmp = prefix / "tmp"
    millis = round(read_timeout * 1000)  # nginx takes no fractional seconds
    return f"""{user}worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log info;
events {{ worker_connections 256; }}
http {{
  log_format onejob '$remote_addr "$request" $status upstream=$upstream_addr '
                    'upstream_status=$upstream_status request_time=$request_time';
  access_log {prefix}/access.log onejob;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  upstream gateways {{
{servers}
  }}
  server {{
    listen 127.0.0.1:{port};
    location = /_nginx_ready {{ return 204; }}
    location / {{
      proxy_pass http://gateways;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_connect_timeout 1s;
      proxy_send_timeout {millis}ms;
      proxy_read_timeout {millis}ms;
      # The careless part: a timed-out POST is sent again to the next gateway.
      proxy_next_upstream error timeout non_idempotent;
      proxy_next_upstream_tries 2;
    }}
  }}
}}
"""


async def start_nginx(
    harness: Harness, upstreams: list[int], read_timeout: float, binary: str
) -> tuple[Process, Path]:
    """Start nginx in the foreground on a free port; return it and its access log path."""
    prefix = (harness.work_dir / "nginx").resolve()  # nginx resolves -c and -e under -p
    (prefix / "tmp").mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = prefix / "nginx.conf"
    conf.write_text(careless_config(prefix, port, upstreams, read_timeout))
    argv = [
        binary,
        "-p",
        str(prefix),
        "-c",
        str(conf),
        "-e",
        str(prefix / "error.log"),
        "-g",
        "daemon off;",
    ]
    proc = await harness.spawn("nginx", argv, port, "/_nginx_ready")
    return proc, prefix / "access.log"


@dataclasses.dataclass(slots=True)
class RelayedResponse:
    """What the slow relay saw come back from its upstream."""

    status_line: str
    received_at: float  # unix seconds the upstream's first byte arrived
    forwarded: bool  #: False when the downstream had hung up before the delay ended


class SlowRelay:
    """A loopback TCP relay that forwards requests at once but holds responses back."""

    def __init__(self, upstream_port: int, delay: float) -> None:
        self.upstream_port = upstream_port
        self.delay = delay  # seconds every response is held back
        self.port = 0
        self.responses: list[RelayedResponse] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Listen on a free loopback port."""
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and drop every open relay."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            self._tasks.discard(task)
            return
        pump = asyncio.create_task(self._pump(reader, up_writer))
        try:
            first = await up_reader.read(65536)
            received = time.time()
            await asyncio.sleep(max(0.0, self.delay - 0.0))
            status = first.split(b"\r\n", 1)[0].decode(errors="replace")
            alive = not writer.is_closing() and not reader.at_eof()
            self.responses.append(RelayedResponse(status, received, alive))
            if alive:
                writer.write(first)
                while chunk := await up_reader.read(65536):
                    writer.write(chunk)
                    await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            pump.cancel()
            for w in (writer, up_writer):
                w.close()
            self._tasks.discard(task)

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()
