"""A ``--sim`` run writes to a scratch registry and report folder of its own (issue 47, 1).

Before, ``onejob certify --sim`` wrote 39 certificates of 13 made-up providers into the
live registry (``reports/certifications.json``), which running gateways re-read, and
replaced the live run's ``contracts.html``.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from cli.certify import (
    DEFAULT_REGISTRY,
    SIM_REGISTRY,
    SIM_REPORT_DIR,
    certify,
    cmd_can_i_failover,
)

from .conftest import parse


async def test_a_sim_run_leaves_the_live_registry_and_reports_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    args = parse(
        "certify", "--sim", "--repeats", "1", "--provider", "faithful",
        "--provider", "faithful-claude", "--contract", "ticket-triage@1",
    )  # fmt: skip
    out = io.StringIO()
    assert await certify(args, out) == 0, out.getvalue()
    assert not (tmp_path / DEFAULT_REGISTRY).exists()
    assert not (tmp_path / "reports/out/contracts.html").exists()
    assert (tmp_path / SIM_REGISTRY).exists()
    assert (tmp_path / SIM_REPORT_DIR / "contracts.html").exists()
    assert f"registry {SIM_REGISTRY}" in out.getvalue()
    # can-i-failover --sim reads the same scratch registry by default.
    said = io.StringIO()
    ask = parse(
        "can-i-failover", "--sim", "--contract", "ticket-triage@1",
        "--from", "faithful", "--to", "faithful-claude",
    )  # fmt: skip
    assert cmd_can_i_failover(ask, said) == 0, said.getvalue()  # read from the scratch file
    assert said.getvalue().startswith("yes: certified")


def test_the_result_goes_to_stdout_and_progress_to_stderr(tmp_path: Path) -> None:
    """``onejob certify > out.txt`` captured nothing: everything went to stderr (issue 47, 6)."""
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [
            sys.executable, "-m", "cli", "certify", "--sim", "--mode", "replay",
            "--provider", "faithful", "--contract", "ticket-triage@1",
            "--registry", str(tmp_path / "c.json"), "--report-dir", str(tmp_path / "out"),
        ],
        cwd=root, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "certification(s) passed" in done.stdout and "faithful" in done.stdout
    assert "certifying 1 provider(s)" in done.stderr
    assert "certification(s) passed" not in done.stderr
