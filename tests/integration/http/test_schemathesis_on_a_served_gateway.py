"""schemathesis against a real ``onejob serve``: the OpenAPI document against the server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from served import serving, wait_healthy

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
#: What no OpenAPI document can say (issued cursors, the certification registry's state,
#: the JSON rules' U+0000), each setting with its reason; every check runs.
CONFIG = Path(__file__).with_name("schemathesis.toml")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_schemathesis_finds_no_server_error_and_no_drift_from_the_openapi_document(
    database_url: str, tmp_path: Path
) -> None:
    port, sim_port = free_port(), free_port()
    created = subprocess.run(
        [str(BIN / "onejob"), "keys", "create", "ops", "--admin", "--database-url", database_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    key = created.stdout.strip()
    args = ["serve", "--port", str(port), "--database-url", database_url]
    with serving(args, tmp_path, ONEJOB_SIM_PORT=str(sim_port)) as proc:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(f"{base}/healthz", proc)
        run = subprocess.run(
            [
                str(BIN / "st"),
                "--config-file",
                str(CONFIG),
                "run",
                f"{base}/schema/openapi.json",
                "--header",
                f"Authorization: Bearer {key}",
                "--checks",
                "all",
                "--max-examples",
                "10",
                "--seed",
                "1",
                "--no-color",
            ],
            cwd=tmp_path,
            env={**os.environ, "SCHEMATHESIS_TELEMETRY": "false"},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert proc.poll() is None, "the gateway died under schemathesis"
    assert run.returncode == 0, run.stdout[-6000:]
    assert "Tested: 26" in run.stdout  # every operation in the document was exercised
    log = (tmp_path / "serve.log").read_text()
    assert '"status": 500' not in log and '"level": "ERROR"' not in log
