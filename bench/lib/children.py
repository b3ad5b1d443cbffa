"""Child processes of a benchmark: started in their own group, waited for, stopped.

Every server a benchmark measures (the gateway, the upstream, the bare server, a peer)
runs as a child of the script, in a process group of its own so that its workers go
with it, and is stopped with SIGTERM (then SIGKILL) when its block ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

#: The repository's root: the children's working directory, so ``-m bench...`` resolves.
ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 60.0  # seconds for a child process to answer
EXIT_TIMEOUT = 20.0  # seconds
LISTEN_TIMEOUT = 10.0  # seconds for a child to accept connections


def say(message: str) -> None:
    """Print progress on stderr."""
    print(message, file=sys.stderr, flush=True)


def free_port() -> int:
    """Return a port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def child(
    args: list[str],
    log: Path,
    *,
    executable: str = sys.executable,
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run a child process for the block; SIGTERM it (then SIGKILL) at the end.

    By default it is this Python in the repository; a peer of the comparison passes its
    own virtualenv's program, a working directory of its own and extra environment.
    """
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [executable, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, "ONEJOB_LOG_LEVEL": "WARNING", **(env or {})},
            start_new_session=True,  # its own group, so its children go with it
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the group
        proc.wait(EXIT_TIMEOUT)


def tail(log: Path) -> str:
    """Return the end of a child's log."""
    return log.read_text(errors="replace")[-4000:]


async def ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Wait (bounded) until ``url`` answers 200."""
    deadline = time.monotonic() + READY_TIMEOUT
    async with httpx.AsyncClient(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"{url}: process exited:\n{tail(log)}")
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(url)).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise SystemExit(f"{url} never became ready")


async def listening(port: int, proc: subprocess.Popen[bytes], log: Path, what: str) -> None:
    """Wait until ``proc`` accepts connections on ``port`` (10 s at most)."""
    deadline = time.monotonic() + LISTEN_TIMEOUT
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start:\n{tail(log)}")
        with contextlib.suppress(OSError):
            with socket_to(port):
                return
        await asyncio.sleep(0.05)


@contextlib.contextmanager
def socket_to(port: int) -> Iterator[None]:
    """Connect once to ``port`` (raises OSError while nothing listens)."""
    with socket.create_connection(("127.0.0.1", port), timeout=1):
        yield
