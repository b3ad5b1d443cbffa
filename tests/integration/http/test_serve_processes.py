"""``onejob serve`` as an operator runs it: one process or ``--workers 2``, started on a
taken simulator port, stopped with Ctrl-C while attempts are in flight, on a real
provider it cannot reach. Every stderr line is JSON, with no ERROR among them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from served import ONEJOB, wait_healthy

pytestmark = pytest.mark.slow

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


@contextlib.contextmanager
def started(args: list[str], cwd: Path, **env: str) -> Iterator[subprocess.Popen[str]]:
    """Run ``onejob ARGS`` in a process group of its own (as a terminal would), stderr to
    ``cwd/serve.log``; kill the group if the test leaves it running."""
    with (cwd / "serve.log").open("w") as log:
        proc = subprocess.Popen(
            [*ONEJOB, *args],
            cwd=cwd,
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=log,
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


def json_lines(path: Path) -> list[dict[str, Any]]:
    lines = []
    for raw in path.read_text().splitlines():
        try:
            lines.append(json.loads(raw))
        except ValueError:
            pytest.fail(f"a stderr line of onejob serve is not JSON: {raw!r}")
    return lines


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("which", ["gateway", "simulator"])
def test_a_taken_port_stops_serve_at_once_with_one_line_naming_the_setting(
    tmp_path: Path, workers: str, which: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        port, sim_port = (busy, free_port()) if which == "gateway" else (free_port(), busy)
        url = f"sqlite+aiosqlite:///{tmp_path / 'onejob.db'}"
        args = ["serve", "--workers", workers, "--port", str(port), "--database-url", url]
        done = run(args, tmp_path, ONEJOB_SIM_PORT=str(sim_port))
    assert done.returncode == 2, done.stderr
    fix = (
        "choose another --port (or ONEJOB_PORT), or stop what listens there"
        if which == "gateway"
        else "set ONEJOB_SIM_PORT (or [simulator] port in the config file) to a free port, "
        "or stop what listens there"
    )
    what = "" if which == "gateway" else "the bundled simulator "
    assert done.stderr == (
        f"onejob serve: {what}cannot listen on 127.0.0.1:{busy} (Address already in use): {fix}\n"
    )
    assert not (tmp_path / "onejob.db").exists(), "it migrated before finding out"


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_lets_attempts_in_flight_finish_then_stops_the_simulator_last(
    tmp_path: Path, workers: str
) -> None:
    port, sim_port = free_port(), free_port()
    url = f"sqlite+aiosqlite:///{tmp_path / 'onejob.db'}"
    key = run(["keys", "create", "alice", "--database-url", url], tmp_path).stdout.strip()
    args = ["serve", "--workers", workers, "--port", str(port), "--database-url", url]
    base = f"http://127.0.0.1:{port}"
    with started(args, tmp_path, ONEJOB_SIM_PORT=str(sim_port)) as proc:
        wait_healthy(f"{base}/healthz", proc, tmp_path / "serve.log")
        delay = {"behaviours": [{"kind": "delay", "seconds": 2.5}], "count": 2}
        httpx.post(f"http://127.0.0.1:{sim_port}/_sim/script", json=delay, timeout=5)
        ids = []
        for n in range(2):
            body = {**TICKET, "input": {**TICKET["input"], "ticket_id": f"SUP-{n}"}}
            headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": f'"stop-{n}"'}
            created = httpx.post(f"{base}/v1/jobs", json=body, headers=headers, timeout=10)
            assert created.status_code == 201, created.text
            ids.append(created.json()["id"])
        time.sleep(0.5)  # both calls are on the wire, held by the simulator
        began = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
        assert proc.wait(timeout=30) == 0
        stopped_in = time.monotonic() - began

    lines = json_lines(tmp_path / "serve.log")
    assert [line for line in lines if line["level"] in ("ERROR", "CRITICAL")] == []
    assert not any("exc" in line for line in lines)
    messages = [line["msg"] for line in lines]
    waiting = [m for m in messages if m.startswith("waiting for ")]
    assert waiting and all("in flight (at most shutdown_grace, 10s)" in m for m in waiting)
    assert messages[-1] == "bundled simulator stopped", messages[-5:]
    last_dispatcher = max(i for i, m in enumerate(messages) if m == "dispatcher stopped")
    assert last_dispatcher < messages.index("bundled simulator stopped")
    assert stopped_in < 10, "the attempts, not the whole grace, were waited for"
    sim_gone = not _listening(sim_port)
    assert sim_gone, "the simulator process outlived onejob serve"
    statuses = _statuses(url, ids)
    assert statuses == ["succeeded", "succeeded"], statuses


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_ends_event_streams_and_waits_instead_of_waiting_for_them(
    tmp_path: Path, workers: str
) -> None:
    port, sim_port = free_port(), free_port()
    url = f"sqlite+aiosqlite:///{tmp_path / 'onejob.db'}"
    key = run(["keys", "create", "alice", "--database-url", url], tmp_path).stdout.strip()
    args = ["serve", "--workers", workers, "--port", str(port), "--database-url", url]
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": '"open-1"'}
    with started(args, tmp_path, ONEJOB_SIM_PORT=str(sim_port)) as proc:
        wait_healthy(f"{base}/healthz", proc, tmp_path / "serve.log")
        ambiguous = {"behaviours": [{"kind": "status", "code": 502}], "count": 1}
        httpx.post(f"http://127.0.0.1:{sim_port}/_sim/script", json=ambiguous, timeout=5)
        job = httpx.post(f"{base}/v1/jobs", json=TICKET, headers=headers, timeout=10).json()
        unknown = httpx.get(
            f"{base}/v1/jobs/{job['id']}", headers={**headers, "Prefer": "wait=5"}, timeout=10
        ).json()
        assert unknown["status"] == "unknown", unknown  # open until someone resolves it
        with httpx.Client(timeout=30) as client:
            stream = client.send(
                client.build_request(
                    "GET",
                    f"{base}/v1/jobs/{job['id']}/events",
                    headers={**headers, "Accept": "text/event-stream"},
                ),
                stream=True,
            )
            time.sleep(0.5)
            began = time.monotonic()
            os.killpg(proc.pid, signal.SIGINT)
            text = "".join(stream.iter_text())  # ends when the server ends the stream
            stream.close()
        assert proc.wait(timeout=20) == 0
        stopped_in = time.monotonic() - began

    assert "event: job" in text
    assert stopped_in < 5, f"the open stream held the stop for {stopped_in:.1f}s"
    lines = json_lines(tmp_path / "serve.log")
    assert [line for line in lines if line["level"] in ("ERROR", "CRITICAL")] == []


def test_a_provider_out_of_reach_and_without_its_key_says_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    url = f"sqlite+aiosqlite:///{tmp_path / 'onejob.db'}"
    (tmp_path / "onejob.toml").write_text(
        "[providers.openai-main]\n"
        'protocol = "openai"\n'
        'base_url = "http://onejob-no-such-host.invalid/v1"\n'
        'model = "gpt-4o-mini"\n'
        'api_key_env = "ONEJOB_TEST_UNSET_OPENAI_KEY"\n'
        "[providers.claude]\n"
        'protocol = "anthropic"\n'
        'base_url = "http://onejob-no-such-host.invalid"\n'
        'model = "claude-x"\n'
        '[routes."*"]\n'
        'primary = "openai-main"\n'
        'fallbacks = ["claude"]\n'
    )
    key = run(["keys", "create", "alice", "--database-url", url], tmp_path).stdout.strip()
    args = ["serve", "--port", str(port), "--database-url", url]
    base = f"http://127.0.0.1:{port}"
    env = {"ONEJOB_CERTIFICATIONS": str(tmp_path / "certifications.json")}
    monkeypatch.delenv("ONEJOB_TEST_UNSET_OPENAI_KEY", raising=False)
    with started(args, tmp_path, **env) as proc:
        wait_healthy(f"{base}/healthz", proc, tmp_path / "serve.log")
        headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": '"unreachable-1"'}
        created = httpx.post(f"{base}/v1/jobs", json=TICKET, headers=headers, timeout=10)
        job = httpx.get(
            f"{base}/v1/jobs/{created.json()['id']}",
            headers={**headers, "Prefer": "wait=10"},
            timeout=20,
        ).json()
        events = httpx.get(f"{base}/v1/jobs/{job['id']}/events", headers=headers, timeout=5)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0

    assert job["status"] == "failed", job
    [attempt] = job["attempts"]
    assert attempt["error"]["message"].startswith(
        "could not connect to openai-main (openai): ConnectError: "
    )
    assert "not known" in attempt["error"]["message"], attempt["error"]
    [skipped] = [e for e in events.json()["events"] if e["kind"] == "failover_skipped"]
    assert skipped["detail"]["fallback"] == "claude"
    warnings = [line for line in json_lines(tmp_path / "serve.log") if line["level"] == "WARNING"]
    assert {
        "provider openai-main has no API key: ONEJOB_TEST_UNSET_OPENAI_KEY is not set; "
        "its calls will be refused"
    } <= {line["msg"] for line in warnings}
    assert not [line for line in warnings if line.get("provider") == "claude"]


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def _statuses(url: str, ids: list[str]) -> list[str]:
    import asyncio

    from gateway.settings import DatabaseConfig, ShortcutsConfig
    from gateway.store import open_store

    async def read() -> list[str]:
        store = await open_store(
            url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
        )
        try:
            return [str((await store.get_job(job_id)).status) for job_id in ids]  # type: ignore[union-attr]
        finally:
            await store.close()

    return asyncio.run(read())
