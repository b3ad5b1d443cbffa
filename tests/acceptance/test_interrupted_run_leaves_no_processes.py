"""SIGTERM to ``onejob scenarios run`` stops every process it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BROKEN = Path(__file__).with_name("broken_onejob.py")
START_TIMEOUT = 60.0  # seconds for the scenario's processes to appear
STOP_TIMEOUT = 20.0  # seconds for the run to clean up after SIGTERM

RUNNER = f"""
import asyncio, sys
from pathlib import Path
from cli.scenarios import run_and_report
from scenarios.runner import RunOptions
options = RunOptions(report_dir=Path(sys.argv[1]), onejob_argv=[sys.executable, {str(BROKEN)!r}])
sys.exit(asyncio.run(run_and_report(["worker-crash"], options, sys.stdout)))
"""


def scenario_markers(tmp_path: Path) -> list[str]:
    """Return strings that identify this run's processes: its directory and their ports."""
    markers = [str(tmp_path)]
    for log in tmp_path.glob("runs/*/logs/*/*.log"):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("--- start ") and "--port " in line:
                markers.append("--port " + line.split("--port ", 1)[1].split()[0] + " ")
    return markers


def pids_of(markers: list[str]) -> list[int]:
    """Return the pids whose command line mentions any marker (excluding this test)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        if any(m in cmdline + " " for m in markers) and state != "Z":
            found.append(int(entry.name))
    return found


def test_sigterm_stops_the_run_and_every_child_process(tmp_path: Path) -> None:
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if list(tmp_path.glob("runs/*/logs/worker-crash/gateway.log")):
            break
        time.sleep(0.1)
    assert list(tmp_path.glob("runs/*/logs/worker-crash/gateway.log")), (
        "the scenario never started its gateway"
    )
    time.sleep(0.5)
    markers = scenario_markers(tmp_path)
    assert len(markers) >= 3, markers  # the directory, the simulator's and gateway's ports
    assert len(pids_of(markers)) >= 2, "the simulator and gateway are not both running"
    runner.send_signal(signal.SIGTERM)
    out, _ = runner.communicate(timeout=STOP_TIMEOUT)
    assert runner.returncode == 130, out
    assert "interrupted" in out
    assert not (tmp_path / "latest").exists(), "an interrupted run became the latest"
    deadline = time.monotonic() + 5
    while pids_of(markers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pids_of(markers) == []
