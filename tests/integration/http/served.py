"""A real ``onejob`` process for the tests that need one: start it, wait for health, stop it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ONEJOB = [str(Path(sys.executable).parent / "onejob")]  # the installed console script
STARTUP = 30.0  # seconds


@contextlib.contextmanager
def serving(
    args: list[str], cwd: Path, *, stdout_too: bool = False, **env: str
) -> Iterator[subprocess.Popen[str]]:
    """Run ``onejob ARGS`` in ``cwd``, stderr (and stdout, if asked) to ``cwd/serve.log``."""
    with (cwd / "serve.log").open("w") as log:
        proc = subprocess.Popen(
            [*ONEJOB, *args],
            cwd=cwd,
            env={**os.environ, **env},
            stdout=log if stdout_too else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if stdout_too else log,
            text=True,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_healthy(url: str, proc: subprocess.Popen[str], log: Path | None = None) -> None:
    """Wait (bounded) until ``url`` answers 200; fail with the log if the process exits."""
    said = (lambda: ": " + log.read_text()) if log is not None else (lambda: "")
    deadline = time.monotonic() + STARTUP
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"onejob exited {proc.returncode}{said()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code == 200:
                return
        time.sleep(0.1)
    raise AssertionError(f"{url} did not become healthy{said()}")
