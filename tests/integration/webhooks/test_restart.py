"""A gateway killed between the commit and the delivery still delivers after a restart
(issue 45): real ``onejob serve`` processes on SQLite and PostgreSQL.

The first gateway's delivery pass runs once at its start, then not for an hour
(``[webhooks] interval``): the job's end is committed by it and never sent before it is
killed (SIGKILL: nothing runs on the way out). A second gateway on the same database reads
the event off the audit trail and delivers it, verified with ``standardwebhooks``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from standardwebhooks.webhooks import Webhook as Verifier

from gateway.settings import DatabaseConfig, ShortcutsConfig, simulator_defaults
from gateway.store import open_store

pytestmark = pytest.mark.slow

ONEJOB = [str(Path(sys.executable).parent / "onejob")]  # the installed console script
STARTUP = 30.0  # seconds, at most, for a gateway to answer /healthz
TOKEN = "receiver-s3cret"  # a receiver's own token in its URL
TICKET = {
    "contract": "ticket-triage@1",
    "input": {
        "ticket_id": "SUP-1",
        "channel": "email",
        "customer": {"name": "Priya", "plan": "pro"},
        "subject": "Charged twice",
        "body": "My card was charged twice for March.",
    },
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def toml_lines(prefix: str, data: dict[str, Any], out: list[str]) -> None:
    """Write ``data`` as TOML tables (values as JSON, which TOML reads the same here)."""
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict) and v is not None}
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    if prefix and (scalars or not tables):
        out.append(f"[{prefix}]")
    out.extend(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in scalars.items())
    for key, table in tables.items():
        toml_lines(f"{prefix}.{json.dumps(key)}" if prefix else json.dumps(key), table, out)


def config(path: Path, interval: float) -> Path:
    """Simulated routes (never called: no dispatcher), deliveries to loopback allowed."""
    data = simulator_defaults(port=free_port())
    data["simulator"]["enabled"] = False
    data["dispatcher"] = {"enabled": False}
    data["webhooks"] = {"allow_hosts": ["127.0.0.1"], "interval": interval}
    lines: list[str] = []
    toml_lines("", data, lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@contextlib.contextmanager
def gateway(
    cwd: Path, toml: Path, url: str, port: int, log: str
) -> Iterator[subprocess.Popen[str]]:
    """Run ``onejob serve`` in a process group of its own; kill the group on the way out."""
    with (cwd / log).open("w") as out:
        proc = subprocess.Popen(
            [*ONEJOB, "serve", "--config", str(toml), "--database-url", url, "--port", str(port)],
            cwd=cwd,
            env={**os.environ},
            stdout=subprocess.DEVNULL,
            stderr=out,
            text=True,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


async def healthy(base: str, proc: subprocess.Popen[str], log: Path) -> None:
    async with httpx.AsyncClient() as client, asyncio.timeout(STARTUP):
        while True:
            if proc.poll() is not None:
                said = await asyncio.to_thread(log.read_text)
                raise AssertionError(f"onejob exited {proc.returncode}: {said}")
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"{base}/healthz", timeout=1)).status_code == 200:
                    return
            await asyncio.sleep(0.1)


async def test_a_gateway_killed_after_the_commit_delivers_after_a_restart(
    database_url: str, tmp_path: Path, receiver: Any
) -> None:
    store = await open_store(
        database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        _, key = await store.create_api_key("alice", frozenset({"jobs"}))
    finally:
        await store.close()
    auth = {"Authorization": f"Bearer {key}"}
    first, second = free_port(), free_port()
    asleep = config(tmp_path / "asleep.toml", interval=3600.0)
    awake = config(tmp_path / "awake.toml", interval=0.2)

    with gateway(tmp_path, asleep, database_url, first, "first.log") as proc:
        base = f"http://127.0.0.1:{first}"
        await healthy(base, proc, tmp_path / "first.log")
        async with httpx.AsyncClient(base_url=base, headers=auth, timeout=10) as api:
            made = await api.post(
                "/v1/webhooks",
                json={"url": f"{receiver.url}?token={TOKEN}", "events": ["job.cancelled"]},
            )
            assert made.status_code == 201, made.text
            secret = made.json()["secret"]
            job = await api.post(
                "/v1/jobs",
                json=TICKET,
                headers={"Idempotency-Key": '"restart-1"'},
            )
            assert job.status_code == 201, job.text
            job_id = job.json()["id"]
            cancelled = await api.post(f"/v1/jobs/{job_id}/cancel")
            assert cancelled.status_code == 200, cancelled.text
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert receiver.got == []  # committed, never sent

    with gateway(tmp_path, awake, database_url, second, "second.log") as proc:
        await healthy(f"http://127.0.0.1:{second}", proc, tmp_path / "second.log")
        got = await receiver.until(1)
    payload = Verifier(secret).verify(got.body, got.headers)
    assert payload["type"] == "job.cancelled"
    assert payload["data"]["id"] == job_id and payload["data"]["status"] == "cancelled"
    assert len(receiver.got) == 1
    for log in ("first.log", "second.log"):  # the receiver's URL never reaches a log line
        assert TOKEN not in await asyncio.to_thread((tmp_path / log).read_text)
