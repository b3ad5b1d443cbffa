"""P4 in the comparison: the seeded and the nearly empty database measured in alternated
rounds, and the ratio taken from their medians."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.lib import goals, p4


def wrk_run(rps: float, p99_ms: float) -> dict[str, Any]:
    return {
        "rps": rps,
        "p50_ms": p99_ms / 3,
        "p99_ms": p99_ms,
        "bad": 0,
        "socket_errors": 0,
        "gateway_cpu_ms_per_request": 2.0,
    }


async def test_rounds_alternate_between_the_two_databases(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    measured: list[tuple[str, str]] = []
    p99s = {
        "empty": iter([50.0, 70.0, 60.0, 55.0, 80.0]),
        "seeded": iter([66.0, 60.0, 90.0, 62.0, 70.0]),
    }

    @contextlib.contextmanager
    def database(kind: str, work: Path) -> Iterator[str]:
        yield "postgresql+asyncpg://seeded"

    async def prepare(url: str) -> str:
        return "key"

    @contextlib.asynccontextmanager
    async def gateway(settings: Path, port: int, work: Path) -> AsyncIterator[int]:
        yield 222

    def measure(base: str, script: Path, **kw: Any) -> dict[str, Any]:
        side = "seeded" if kw["pid"] == 222 else "empty"
        measured.append((side, kw["prefix"]))
        return wrk_run(600, next(p99s[side]))

    monkeypatch.setattr(p4, "database", database)
    monkeypatch.setattr(p4, "prepare", prepare)
    monkeypatch.setattr(p4, "gateway", gateway)
    monkeypatch.setattr(p4, "seed", lambda url, kind, jobs: 1.5)
    monkeypatch.setattr(p4, "measure", measure)
    monkeypatch.setattr(p4, "run_wrk", lambda *a, **kw: wrk_run(0, 0))
    monkeypatch.setattr(p4, "say", lambda message: None)
    args = argparse.Namespace(seed=1000, duration=1.0)
    out = await p4.p4_rounds(
        "postgresql",
        args,
        lambda url, port, dispatcher: tmp_path / "s.json",
        tmp_path,
        ("http://empty", tmp_path / "c.lua", 111),
        "{}",
    )
    assert p4.P4_ROUNDS == 5
    assert [side for side, _ in measured] == ["empty", "seeded", "seeded", "empty"] * 2 + [
        "empty",
        "seeded",
    ]
    assert len({prefix for _, prefix in measured}) == 10  # fresh idempotency keys each run
    assert out["seed"] == {"jobs": 1000, "seconds": 1.5}
    assert out["p4"]["empty"]["p99_ms"] == [50.0, 70.0, 60.0, 55.0, 80.0]
    assert out["p4"]["seeded"]["median_p99_ms"] == 66.0

    report: dict[str, Any] = {
        "upstream_1": wrk_run(20000, 0.3),
        "databases": [
            {
                "database": "postgresql",
                # The first creation run's p99 (100 ms) is not what P4 compares with.
                "creation_16": wrk_run(600, 100.0),
                "replay_16": wrk_run(700, 30.0),
                "rounds": [{"creation": wrk_run(600, 100.0), "replay": wrk_run(700, 30.0)}],
                "sync_16": wrk_run(400, 90.0),
                "sync_1": wrk_run(150, 9.0),
                **out,
            }
        ],
    }
    ratios = goals.ratios(report)["postgresql"]
    assert ratios["P4_creation_p99_seeded_vs_empty"] == 1.1  # 66 / 60
