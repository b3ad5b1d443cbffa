"""The comparison's peers: cached virtualenvs, and a report that survives a failed peer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.lib import compare_summary, goals, peers


def wrk_run(rps: float, p50_ms: float) -> dict[str, Any]:
    return {
        "rps": rps,
        "p50_ms": p50_ms,
        "p99_ms": p50_ms * 3,
        "bad": 0,
        "socket_errors": 0,
        "gateway_cpu_ms_per_request": 4.0,
    }


def test_a_virtualenv_is_reused_only_while_its_pins_and_python_are_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(peers, "VENVS", tmp_path)
    peer = peers.Peer("p", "P", ("pkg==1.0",), "import pkg")
    assert not peers.is_current(peer)  # nothing built yet
    (tmp_path / "p/bin").mkdir(parents=True)
    (tmp_path / "p/bin/python").touch()
    assert not peers.is_current(peer)  # an install that stopped before its marker
    marker = tmp_path / "p" / peers.MARKER
    marker.write_text(json.dumps(peers._marker(peer)), encoding="utf-8")
    assert peers.is_current(peer)
    assert not peers.is_current(peers.Peer("p", "P", ("pkg==2.0",), "import pkg"))
    marker.write_text("{not json", encoding="utf-8")
    assert not peers.is_current(peer)


def test_a_peer_that_could_not_run_is_reported_and_the_other_one_still_counts() -> None:
    report: dict[str, Any] = {
        "upstream_1": wrk_run(20000, 0.1),
        "databases": [
            {
                "database": "postgresql",
                "creation_16": wrk_run(600, 20),
                "replay_16": wrk_run(500, 25),
                "rounds": [{"creation": wrk_run(600, 20), "replay": wrk_run(500, 25)}],
                "sync_16": wrk_run(240, 60),
                "sync_1": wrk_run(140, 7.0),
            }
        ],
        "peers": {
            "litellm": {"title": "LiteLLM proxy", "requirements": ["x"], "error": "no wheel"},
            "dbos": {
                "title": "DBOS Transact app",
                "requirements": ["dbos==3.4.0"],
                "load_16": wrk_run(120, 130),
                "load_1": wrk_run(100, 9.0),
            },
        },
    }
    report["ratios"] = goals.ratios(report)
    assert report["ratios"]["postgresql"]["sync_vs_dbos_16"] == 2.0
    assert "sync_vs_litellm_16" not in report["ratios"]["postgresql"]
    lines = compare_summary.peer_summary(report)
    assert "[litellm] LiteLLM proxy: not measured: no wheel" in lines
    assert "[postgresql] sync jobs/s at 16 connections = 2.0x DBOS Transact app (goal >= 3.0x)" in (
        lines
    )
    assert "[postgresql] p50 at 1 connection: onejob 7.0 ms, DBOS Transact app 9.0 ms" in lines


def test_without_peers_the_summary_has_no_peer_lines() -> None:
    assert compare_summary.peer_summary({"databases": [{"database": "sqlite"}], "ratios": {}}) == []
