from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest

STARTUP_TIMEOUT = 20.0  # seconds


def test_sim_serve_runs_a_simulator_process_and_stops_on_sigterm() -> None:
    cmd = [
        sys.executable,
        "-m",
        "cli",
        "sim",
        "serve",
        "--port",
        "0",
        "--profile",
        "sim-x=drifting",
        "--log-level",
        "warning",
    ]
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=dict(os.environ)
    ) as proc:
        _check_serving(proc)


def _check_serving(proc: subprocess.Popen[str]) -> None:
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # bounded: the process prints this once listening
        assert line.startswith("onejob simulator listening on http://127.0.0.1:"), line
        base = line.rsplit(" ", 1)[1].strip()
        with urllib.request.urlopen(f"{base}/_sim/profiles", timeout=5) as resp:
            profiles = json.loads(resp.read())
        assert profiles == {"default": "faithful", "profiles": {"sim-x": "drifting"}}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STARTUP_TIMEOUT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sim_serve_refuses_an_unknown_profile() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cli", "sim", "serve", "--profile", "x=psychic"],
        capture_output=True,
        text=True,
        timeout=STARTUP_TIMEOUT,
    )
    assert result.returncode == 2
    assert "unknown profile 'psychic'" in result.stderr


@pytest.mark.parametrize("bad", ["noequals", "=drifting"])
def test_sim_serve_refuses_a_malformed_profile_pair(bad: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cli", "sim", "serve", "--profile", bad],
        capture_output=True,
        text=True,
        timeout=STARTUP_TIMEOUT,
    )
    assert result.returncode == 2
    assert "expected PROVIDER=PROFILE" in result.stderr
