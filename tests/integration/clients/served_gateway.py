"""A real ``onejob serve`` (SQLite, the bundled simulator) on free ports, for client tests.

The clients' tests talk to processes, not to an app in the test's own loop: the gateway is
``onejob serve --config FILE`` with the simulator in its ``[simulator]`` table, an owner's
key made with ``onejob keys create``, and both simulated providers
certified for ``ticket-triage@1`` (so the fallback button is allowed to call
``sim-anthropic``).

Used two ways:
- from pytest: ``with served_stack(tmp_path) as stack: ...``;
- from ``node --test`` (clients/js): ``python tests/integration/clients/served_gateway.py DIR``
  prints one JSON line (``gateway``, ``simulator``, ``key``) once everything
  answers, and stops the gateway when its stdin closes or it gets SIGTERM.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

# The dispatcher tests' harness writes certificates; it is reused, not copied.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dispatch"))

READY_TIMEOUT = 60.0  # seconds the gateway may take to migrate and answer /readyz
STOP_GRACE = 10.0  # seconds between SIGTERM and SIGKILL
PRIMARY_TIMEOUT = 3.0  # seconds: sim-openai's attempt deadline (a hang past it is unknown)
CONTRACT = "ticket-triage@1"


def free_port() -> int:
    """Return a loopback port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def onejob_command() -> list[str]:
    """Return the argv prefix of this environment's ``onejob`` CLI."""
    exe = Path(sys.executable).with_name("onejob")
    if exe.is_file():
        return [str(exe)]
    return [sys.executable, "-c", "import sys; from cli.main import main; sys.exit(main())"]


def config_text(
    gateway_port: int,
    sim_port: int,
    certifications: Path,
    *,
    dispatcher: str = "",
    extra: str = "",
) -> str:
    """Return an ``onejob.toml``: the simulator on ``sim_port``, short deadlines.

    ``dispatcher``: more lines of the ``[dispatcher]`` table (``enabled = false``);
    ``extra``: more tables (``[admission]``), at the end.
    """
    sim = f"http://127.0.0.1:{sim_port}"
    return f"""\
certifications_path = {json.dumps(str(certifications))}
host = "127.0.0.1"
port = {gateway_port}

[simulator]
enabled = true
host = "127.0.0.1"
port = {sim_port}

[dispatcher]
runners = 4
lease_ttl = 5.0
poll_interval = 0.5
reap_interval = 0.2
shutdown_grace = 2.0
{dispatcher}

[reconciler]
enabled = false

[providers.sim-openai]
protocol = "openai"
base_url = "{sim}/p/sim-openai/v1"
model = "sim-gpt"
timeout = {PRIMARY_TIMEOUT}

[providers.sim-anthropic]
protocol = "anthropic"
base_url = "{sim}/p/sim-anthropic"
model = "sim-claude"
timeout = 5.0

[routes."*"]
primary = "sim-openai"
fallbacks = ["sim-anthropic"]
max_attempts = 3
{extra}
"""


@dataclasses.dataclass
class Stack:
    """A served gateway with its simulator, and two keys."""

    gateway: str  #: base URL of the gateway
    simulator: str  #: base URL of the simulator (``/_sim/...``)
    key: str  #: owner ``alice``
    work_dir: Path

    def as_json(self) -> str:
        return json.dumps({"gateway": self.gateway, "simulator": self.simulator, "key": self.key})

    def sim_calls(self, job_id: str | None = None) -> list[dict[str, Any]]:
        """Return the simulator's call log, or the calls made for one job's attempts."""
        calls: list[dict[str, Any]] = httpx.get(f"{self.simulator}/_sim/calls").json()["calls"]
        if job_id is None:
            return calls
        return [c for c in calls if str(c.get("idempotency_key", "")).startswith(f"{job_id}/")]

    def sim_script(self, provider: str | None, *behaviours: dict[str, Any]) -> None:
        """Queue simulator behaviours for the next requests (docs/simulator.md)."""
        response = httpx.post(
            f"{self.simulator}/_sim/script",
            json={"provider": provider, "behaviours": list(behaviours)},
        )
        response.raise_for_status()

    def sim_reset(self) -> None:
        """Clear the simulator's scripts and call log."""
        httpx.post(f"{self.simulator}/_sim/reset").raise_for_status()

    def job_ids(self) -> set[str]:
        """Return the ids of ``alice``'s newest jobs (up to 100)."""
        response = httpx.get(
            f"{self.gateway}/v1/jobs",
            params={"limit": "100"},
            headers={"Authorization": f"Bearer {self.key}"},
        )
        return {job["id"] for job in response.json()["jobs"]}

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Cancel one of ``alice``'s jobs; return it."""
        response = httpx.post(
            f"{self.gateway}/v1/jobs/{job_id}/cancel",
            headers={"Authorization": f"Bearer {self.key}"},
        )
        response.raise_for_status()
        job: dict[str, Any] = response.json()
        return job

    def job(self, job_id: str) -> dict[str, Any]:
        """Return one of ``alice``'s jobs."""
        response = httpx.get(
            f"{self.gateway}/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {self.key}"}
        )
        response.raise_for_status()
        job: dict[str, Any] = response.json()
        return job


def certify_providers(config: Path, certs: Path) -> None:
    """Write passing certificates for both simulated providers on ``CONTRACT``.

    The dispatcher tests' helper writes them (as the console's tests do): a certification
    run proves nothing the clients' tests need, and the gateway reads the file at start.
    """
    from dispatch_harness import certify

    from gateway.settings import load_settings

    settings = load_settings(str(config), env={})
    certify(certs, list(settings.providers.values()), [CONTRACT])


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONEJOB_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _run(*commands: list[str], log: Path, timeout: float = 120.0) -> list[str]:
    """Run commands side by side to completion; return their stdouts; raise if one fails."""
    children = [
        subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(),
            start_new_session=True,
        )
        for argv in commands
    ]
    outs = []
    for argv, child in zip(commands, children, strict=True):
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            raise RuntimeError(f"{' '.join(argv)} took longer than {timeout:.0f} s") from None
        with log.open("ab") as fh:
            fh.write(f"\n--- {' '.join(argv)} -> {child.returncode}\n".encode() + err)
        if child.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {child.returncode}: {err[-2000:]!r}")
        outs.append(out.decode())
    return outs


def _wait_ready(proc: subprocess.Popen[bytes], urls: list[str], log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    for url in urls:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"onejob serve exited: {log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=1.0).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer: {log.read_text()[-3000:]}")
            time.sleep(0.1)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextlib.contextmanager
def served_stack(work_dir: Path, *, dispatcher: str = "", extra: str = "") -> Iterator[Stack]:
    """Serve a gateway with its simulator from ``work_dir`` until the block ends
    (``dispatcher``, ``extra``: more configuration, as ``config_text`` takes it)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    gw_port, sim_port = free_port(), free_port()
    certs = work_dir / "certifications.json"
    config = work_dir / "onejob.toml"
    text = config_text(gw_port, sim_port, certs, dispatcher=dispatcher, extra=extra)
    config.write_text(text, encoding="utf-8")
    certify_providers(config, certs)
    database = f"sqlite+aiosqlite:///{work_dir / 'onejob.db'}"
    log = work_dir / "gateway.log"
    onejob = onejob_command()
    common = ["--config", str(config), "--database-url", database]
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [*onejob, "serve", *common],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env=_env(),
            start_new_session=True,
        )
    try:
        gateway, simulator = f"http://127.0.0.1:{gw_port}", f"http://127.0.0.1:{sim_port}"
        _wait_ready(proc, [f"{gateway}/readyz", f"{simulator}/_sim/health"], log)
        (created,) = _run([*onejob, "keys", "create", "alice", *common], log=log)
        stack = Stack(gateway, simulator, created.split()[-1], work_dir)
        yield stack
    finally:
        _stop(proc)


def _main(work_dir: Path) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with served_stack(work_dir) as stack:
        print(stack.as_json(), flush=True)
        sys.stdin.read()  # until the test runner closes our stdin (or goes away)


if __name__ == "__main__":
    _main(Path(sys.argv[1]))
