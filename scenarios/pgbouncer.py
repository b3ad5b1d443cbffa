"""A real PgBouncer in transaction mode in front of a PostgreSQL (issue 46), for the tests
(tests/conftest.py) and the benchmark beside a direct connection (``bench.pooler``).

``start_pgbouncer`` writes its configuration and user list into a directory of the
caller's, starts Debian's ``pgbouncer`` on a free loopback port, and returns once it accepts
connections; ``PgBouncer.stop`` ends that process by its PID. No system service is
used or started. Every database of the server is reachable through it under its own
name (``* =``), so a test database cloned on the server is reached through the pooler by
changing the URL's host and port (``PgBouncer.url``).

Its server pool is smaller than the clients' (``SERVER_POOL``), so client connections
really share server connections: a statement prepared by name on one of them is missing
on the next, or there already.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from sqlalchemy.engine import make_url

#: Server connections per database and user: fewer than a store's pool of 20 + 10.
SERVER_POOL = 10
START_TIMEOUT = 10.0  # seconds PgBouncer may take to listen
START_TRIES = 3  # ports tried, each picked free, before starting is given up
STOP_TIMEOUT = 10.0  # seconds it may take to exit after SIGTERM


def pgbouncer_binary() -> str | None:
    """Return the path of the ``pgbouncer`` program (Debian puts it in /usr/sbin), or None."""
    found = shutil.which("pgbouncer")
    if found is None and os.access("/usr/sbin/pgbouncer", os.X_OK):
        found = "/usr/sbin/pgbouncer"
    return found


@dataclasses.dataclass
class PgBouncer:
    """A PgBouncer process of this test run, listening on ``port``."""

    port: int
    process: subprocess.Popen[bytes]
    log: Path

    def url(self, database_url: str) -> str:
        """Return ``database_url`` (a URL of the upstream server) through this PgBouncer."""
        url = make_url(database_url).set(host="127.0.0.1", port=self.port)
        return url.render_as_string(hide_password=False)

    def stop(self) -> None:
        """End the process by its PID: SIGTERM, then SIGKILL if it has not exited."""
        if self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()


def free_port() -> int:
    """Return a loopback TCP port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_pgbouncer(
    binary: str,
    directory: Path,
    upstream: str,
    server_pool: int = SERVER_POOL,
    settings: Mapping[str, str | int] | None = None,
) -> PgBouncer:
    """Start PgBouncer (``_start_once``), on another free port when the one picked was
    taken before it could listen there (another process may bind a port between
    ``free_port`` closing it and PgBouncer opening it: tests start one per worker)."""
    for attempt in range(START_TRIES):
        try:
            return _start_once(binary, directory, upstream, server_pool, settings)
        except RuntimeError:
            if attempt == START_TRIES - 1:
                raise
    raise AssertionError("unreachable")


def _start_once(
    binary: str,
    directory: Path,
    upstream: str,
    server_pool: int,
    settings: Mapping[str, str | int] | None,
) -> PgBouncer:
    """Start PgBouncer in transaction mode in front of ``upstream``'s server.

    Its files go in ``directory``: ``pgbouncer.ini``, ``users.txt`` (``auth_type =
    trust``: the user must still be listed) and ``pgbouncer.log`` (its stderr). Run as
    root, it drops to the ``postgres`` user (PgBouncer refuses to run as root).
    ``settings``: more ``[pgbouncer]`` settings, over these.
    """
    server = make_url(upstream)
    user = server.username or "postgres"
    port = free_port()
    users = directory / "users.txt"
    users.write_text(f'"{user}" ""\n')
    lines = [
        "[databases]",
        f"* = host={server.host or '127.0.0.1'} port={server.port or 5432}",
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        f"listen_port = {port}",
        "unix_socket_dir =",
        "auth_type = trust",
        f"auth_file = {users}",
        "pool_mode = transaction",
        f"default_pool_size = {server_pool}",
        "max_client_conn = 2000",
        # A server that refused a login is asked again at once (15 s by default), as a
        # database a test dropped and another created under a new name.
        "server_login_retry = 1",
    ]
    lines += [f"{name} = {value}" for name, value in (settings or {}).items()]
    if os.geteuid() == 0:
        pwd.getpwnam("postgres")  # KeyError: no postgres user to run it as
        lines.append("user = postgres")
    config = directory / "pgbouncer.ini"
    config.write_text("\n".join(lines) + "\n")
    log = directory / "pgbouncer.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [binary, str(config)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    bouncer = PgBouncer(port, process, log)
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"pgbouncer exited ({process.returncode}): {log.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            if process.poll() is None:  # it answers, not another process on that port
                return bouncer
        except OSError:
            if time.monotonic() > deadline:
                bouncer.stop()
                said = log.read_text()
                raise RuntimeError(f"pgbouncer did not listen on {port}: {said}") from None
            time.sleep(0.05)
