"""The ``onejob`` command line as a user runs it: real processes, loopback only."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import httpx
import pytest
from served import ONEJOB, serving, wait_healthy

from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import open_store

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ONEJOB, *args],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_keys_create_prints_only_the_key_on_stdout(database_url: str, tmp_path: Path) -> None:
    done = run(["keys", "create", "alice", "--admin", "--database-url", database_url], tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and lines[0] == done.stdout.strip()
    assert "alice" in done.stderr
    store = await open_store(
        database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        principal = await store.authenticate(lines[0])
    finally:
        await store.close()
    assert principal is not None
    assert (principal.owner_id, principal.is_admin) == ("alice", True)


def test_keys_create_refuses_an_empty_owner(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'keys.db'}"
    for owner, says in (("", "may not be empty"), ("  ", "may not be empty"), (" al", "spaces")):
        done = run(["keys", "create", owner, "--database-url", url], tmp_path)
        assert done.returncode == 2, (owner, done.stdout, done.stderr)
        assert says in done.stderr and done.stdout == ""


async def test_db_upgrade_migrates_a_new_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'fresh.db'}"
    done = run(["db", "upgrade", "--database-url", url], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    store = await open_store(
        url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        await store.ping()
        assert await store.list_attempts(None) == []
    finally:
        await store.close()


def test_serve_with_no_config_runs_a_job_on_the_bundled_simulator(
    database_url: str, tmp_path: Path
) -> None:
    port, sim_port = free_port(), free_port()
    key = run(["keys", "create", "alice", "--database-url", database_url], tmp_path).stdout.strip()
    args = ["serve", "--port", str(port), "--database-url", database_url]
    with serving(args, tmp_path, stdout_too=True, ONEJOB_SIM_PORT=str(sim_port)) as proc:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(f"{base}/healthz", proc, tmp_path / "serve.log")
        assert httpx.get(f"{base}/readyz", timeout=5).status_code == 200
        sim = httpx.get(f"http://127.0.0.1:{sim_port}/_sim/calls", timeout=5)
        assert sim.status_code == 200
        body = {
            "contract": "ticket-triage@1",
            "input": {
                "ticket_id": "SUP-7",
                "channel": "chat",
                "customer": {"name": "Ada", "plan": "free"},
                "subject": "Login",
                "body": "I cannot log in.",
            },
        }
        headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": '"cli-1"'}
        first = httpx.post(f"{base}/v1/jobs", json=body, headers=headers, timeout=10)
        again = httpx.post(f"{base}/v1/jobs", json=body, headers=headers, timeout=10)
        assert (first.status_code, again.status_code) == (201, 200), first.text
        # The built-in config runs the dispatcher against the bundled simulator.
        done = httpx.get(
            f"{base}/v1/jobs/{first.json()['id']}",
            headers={**headers, "Prefer": "wait=20"},
            timeout=30,
        )
        assert done.json()["status"] == "succeeded", done.text
        assert done.json()["result"]["category"]
        metrics = httpx.get(f"{base}/metrics", timeout=5).text
        assert "onejob_jobs_created_total 1.0" in metrics
        assert "onejob_jobs_replayed_total 1.0" in metrics
    assert proc.returncode is not None
    log = (tmp_path / "serve.log").read_text()
    assert '"path": "/v1/jobs"' in log and first.json()["id"] in log
