"""Start and stop the real processes a scenario drives: simulator, gateways, nginx.

Every process runs in its own session on a free loopback port, logs to a file in the
report directory, is waited for with a bounded readiness probe, and is killed when the
``Harness`` closes, whatever happened (no orphans).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import sys
import time
from pathlib import Path
from typing import IO, Any

import httpx

from gateway.settings import SHORTCUTS_ENV

READY_TIMEOUT = 30.0  # seconds a process may take to answer its readiness probe
READY_POLL = 0.05  # seconds between readiness probes
STOP_GRACE = 5.0  # seconds between SIGTERM and SIGKILL
LOG_TAIL = 2000  # characters of a process log quoted in an error


class HarnessError(Exception):
    """A process could not be started or did not become ready."""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def onejob_command() -> list[str]:
    """Return the argv prefix that runs the ``onejob`` CLI of this installation."""
    exe = Path(sys.executable).with_name("onejob")
    if exe.is_file():
        return [str(exe)]
    found = shutil.which("onejob")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys; from cli.main import main; sys.exit(main())"]


def log_tail(path: Path, chars: int = LOG_TAIL) -> str:
    """Return the end of a log file (empty when missing)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-chars:]


def _open_log(path: Path, header: str) -> IO[bytes]:
    """Open a log file for appending and write a header line (the caller closes it)."""
    log = open(path, "ab")
    log.write(f"\n--- {header}\n".encode())
    log.flush()
    return log


@dataclasses.dataclass(slots=True)
class Process:
    """One child process the harness owns."""

    name: str
    argv: list[str]
    log_path: Path
    port: int
    ready_url: str
    env: dict[str, str]
    ready_timeout: float = READY_TIMEOUT  # seconds
    proc: asyncio.subprocess.Process | None = None
    _log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        """Return the process's HTTP base URL."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        """Say whether the process is alive."""
        return self.proc is not None and self.proc.returncode is None

    async def start(self) -> None:
        """Spawn the process in its own session and wait until it answers."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = _open_log(self.log_path, f"start {' '.join(self.argv)}")
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            env=self.env,
            start_new_session=True,
        )
        await self.wait_ready(self.ready_timeout)

    async def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Poll the readiness URL until it answers below 500; raise when time runs out."""
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=1.0) as client:
            while time.monotonic() < deadline:
                if self.proc is not None and self.proc.returncode is not None:
                    raise HarnessError(
                        f"{self.name} exited with {self.proc.returncode} before it was ready; "
                        f"log {self.log_path}:\n{log_tail(self.log_path)}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    response = await client.get(self.ready_url)
                    if response.status_code < 500:
                        return
                await asyncio.sleep(READY_POLL)
        raise HarnessError(
            f"{self.name} did not answer {self.ready_url} within {timeout:.0f} s; "
            f"log {self.log_path}:\n{log_tail(self.log_path)}"
        )

    def kill(self) -> None:
        """Send SIGKILL to the whole process group, as a crash would."""
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """Terminate the process group (SIGTERM, then SIGKILL after ``grace``) and reap it."""
        proc = self.proc
        if proc is not None:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), grace)
                except TimeoutError:
                    self.kill()
                    await proc.wait()
            # Children that outlived their leader (nginx workers) still share the group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
            self._log = None

    async def crash(self) -> None:
        """SIGKILL the process and reap it."""
        self.kill()
        if self.proc is not None:
            await self.proc.wait()
        if self._log is not None:
            self._log.write(b"\n--- SIGKILL by the scenario\n")
            self._log.close()
            self._log = None


class Harness:
    """Own every process of one scenario; ``close`` stops them all."""

    def __init__(
        self,
        work_dir: Path,
        log_dir: Path,
        onejob_argv: list[str] | None = None,
        ready_timeout: float = READY_TIMEOUT,
    ) -> None:
        self.work_dir = work_dir
        self.log_dir = log_dir
        #: The ``onejob`` command; tests replace it to prove scenarios catch a broken build.
        self.onejob = list(onejob_argv) if onejob_argv else onejob_command()
        self.ready_timeout = ready_timeout  # seconds each process may take to become ready
        self.processes: list[Process] = []
        work_dir.mkdir(parents=True, exist_ok=True)
        log_dir.mkdir(parents=True, exist_ok=True)

    def _env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        # A process gets none of this one's settings, but which path the shortcuts take
        # (``ONEJOB_SHORTCUTS=off``: the run that checks the plain library path).
        env = {
            k: v for k, v in os.environ.items() if not k.startswith("ONEJOB_") or k == SHORTCUTS_ENV
        }
        env["PYTHONUNBUFFERED"] = "1"
        env.update(extra or {})
        return env

    async def spawn(
        self,
        name: str,
        argv: list[str],
        port: int,
        ready_path: str,
        env: dict[str, str] | None = None,
    ) -> Process:
        """Start ``argv`` as ``name`` and wait until ``ready_path`` answers on ``port``."""
        proc = Process(
            name=name,
            argv=argv,
            log_path=self.log_dir / f"{name}.log",
            port=port,
            ready_url=f"http://127.0.0.1:{port}{ready_path}",
            env=self._env(env),
            ready_timeout=self.ready_timeout,
        )
        self.processes.append(proc)
        await proc.start()
        return proc

    async def start_simulator(self, name: str = "sim", port: int | None = None) -> Process:
        """Start ``onejob sim serve`` on ``port`` (default: a free one)."""
        port = port or free_port()
        argv = [*self.onejob, "sim", "serve", "--host", "127.0.0.1", "--port", str(port)]
        return await self.spawn(name, argv, port, "/_sim/calls")

    async def start_gateway(
        self, name: str, config_path: Path, database_url: str, port: int | None = None
    ) -> Process:
        """Start ``onejob serve`` (it migrates first) with ``config_path`` on a free port."""
        port = port or free_port()
        argv = [
            *self.onejob,
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--config",
            str(config_path),
            "--database-url",
            database_url,
        ]
        env = {"ONEJOB_INSTANCE_ID": name}
        return await self.spawn(name, argv, port, "/readyz", env)

    async def restart(self, proc: Process) -> Process:
        """Start a stopped or crashed process again with the same command and port."""
        await proc.stop()
        proc.proc = None
        await proc.start()
        return proc

    async def run_cli(self, *args: str, timeout: float = 120.0) -> tuple[int, str, str]:
        """Run one ``onejob`` command to completion; return exit code, stdout, stderr."""
        child = await asyncio.create_subprocess_exec(
            *self.onejob,
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._env(),
            start_new_session=True,
        )
        try:
            out, err = await asyncio.wait_for(child.communicate(), timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            await child.wait()
            raise HarnessError(
                f"onejob {' '.join(args)} took longer than {timeout:.0f} s"
            ) from None
        code = child.returncode if child.returncode is not None else -1
        log = _open_log(self.log_dir / "cli.log", f"onejob {' '.join(args)} -> {code}")
        log.write(out + err)
        log.close()
        return code, out.decode(errors="replace"), err.decode(errors="replace")

    async def create_key(self, database_url: str, owner: str, admin: bool = False) -> str:
        """Create an API key with ``onejob keys create`` and return it."""
        args = ["keys", "create", owner, "--database-url", database_url]
        if admin:
            args.insert(3, "--admin")
        code, out, err = await self.run_cli(*args)
        key = out.strip().splitlines()[-1].strip() if out.strip() else ""
        if code != 0 or not key:
            raise HarnessError(f"onejob keys create {owner} failed ({code}): {err[-LOG_TAIL:]}")
        return key

    def logs(self) -> dict[str, str]:
        """Return process name -> log path for the report."""
        paths = {p.name: str(p.log_path) for p in self.processes}
        cli = self.log_dir / "cli.log"
        if cli.exists():
            paths["cli"] = str(cli)
        return paths

    async def close(self) -> None:
        """Stop every process, newest first, even if stopping one fails."""
        for proc in reversed(self.processes):
            with contextlib.suppress(Exception):
                await proc.stop()

    async def __aenter__(self) -> Harness:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
