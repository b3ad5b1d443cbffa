"""The provider-client benchmark runs end to end on a few calls and writes its report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import client


def test_a_short_run_measures_each_client_at_each_concurrency(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "client_bench.json"
    assert client.main(["--calls", "40", "--concurrency", "1", "3", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["runs"]) == {"1", "3"}
    for runs in report["runs"].values():
        assert set(runs) == {"provider", "httpx", "aiohttp"}
        for rounds in runs.values():
            assert len(rounds) == client.ROUNDS
            assert all(r["calls_per_s"] > 0 and r["cpu_us_per_call"] > 0 for r in rounds)
    assert "3 concurrent: provider" in capsys.readouterr().out
