"""What a real ``onejob serve`` writes to stderr at DEBUG: JSON only, no data, no secrets."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from served import ONEJOB, serving, wait_healthy

pytestmark = pytest.mark.slow

MARKER = "Zq7-INPUT-MARKER-4411"  # a string that only the job's input contains


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def send_raw(port: int, raw: bytes, *, hang_up: bool) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(raw)
        if hang_up:
            return b""
        with contextlib.suppress(OSError):
            return conn.recv(65536)
    return b""


def test_a_served_gateway_at_debug_logs_json_only_and_no_inputs_results_or_keys(
    database_url: str, tmp_path: Path
) -> None:
    port, sim_port = free_port(), free_port()
    created = subprocess.run(
        [*ONEJOB, "keys", "create", "alice", "--database-url", database_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    key = created.stdout.strip()
    args = ["serve", "--port", str(port), "--database-url", database_url]
    env = {"ONEJOB_SIM_PORT": str(sim_port), "ONEJOB_LOG_LEVEL": "DEBUG"}
    log_path = tmp_path / "serve.log"
    with serving(args, tmp_path, **env) as proc:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(f"{base}/healthz", proc, log_path)
        body = {
            "contract": "ticket-triage@1",
            "input": {
                "ticket_id": "SUP-9",
                "channel": "chat",
                "customer": {"name": MARKER, "plan": "free"},
                "subject": "Login",
                "body": f"I cannot log in. {MARKER}",
            },
        }
        headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": '"log-1"'}
        job = httpx.post(f"{base}/v1/jobs", json=body, headers=headers, timeout=10).json()
        done = httpx.get(
            f"{base}/v1/jobs/{job['id']}", headers={**headers, "Prefer": "wait=20"}, timeout=30
        ).json()
        assert done["status"] == "succeeded", done
        # A client that hangs up mid-body, and a request the HTTP parser refuses.
        head = (
            f"POST /v1/jobs HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\n"
            'Idempotency-Key: "log-2"\r\nContent-Type: application/json\r\n'
            "Content-Length: 5000\r\n\r\n"
        )
        send_raw(port, head.encode() + b'{"contract": "ticket', hang_up=True)
        smuggled = b"POST /v1/jobs HTTP/1.1\r\nHost: gw\r\nContent-Length: 3\r\n"
        refused = send_raw(
            port, smuggled + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", hang_up=False
        )
        assert refused.startswith(b"HTTP/1.1 400"), refused
        time.sleep(0.5)  # let the server log the hang-up before it stops
    text = log_path.read_text()
    lines: list[dict[str, Any]] = []
    for raw_line in text.splitlines():
        try:
            lines.append(json.loads(raw_line))
        except ValueError:
            pytest.fail(f"a log line is not JSON: {raw_line!r}")
    assert any(line["level"] == "DEBUG" for line in lines), "DEBUG was not in force"
    for secret in (MARKER, key, json.dumps(done["result"])[1:-1], "SELECT", "INSERT"):
        assert secret not in text, f"{secret!r} reached the log"
    assert [line for line in lines if line["level"] in ("ERROR", "CRITICAL")] == []
    assert not any("exc" in line for line in lines)
    access = [
        (line["method"], line["status"]) for line in lines if line["logger"] == "onejob.access"
    ]
    assert ("POST", 499) in access and ("POST", 500) not in access, access
    assert any(line["msg"] == "Invalid HTTP request received." for line in lines)
