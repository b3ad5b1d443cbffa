"""Several server processes add up their metrics: whichever one a scrape reaches shows all.

Each process here is a real interpreter, as uvicorn's spawned workers are: prometheus_client
chooses its multiprocess mode at import, from ``PROMETHEUS_MULTIPROC_DIR``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics import MULTIPROC_DIR_ENV, Metrics

#: One process's part: count, hold attempts in flight, refresh the unknown-attempts gauge
#: from a store that reports ``UNKNOWN`` ((provider, age) -> n), print the scrape, and then,
#: when stdin says so, end cleanly (``end``) or wait for its SIGKILL (``hang``).
CHILD = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    from gateway.metrics import Metrics

    created, in_flight, unknown = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])

    class Store:
        async def unknown_by_provider_and_age(self, bounds, older):
            return {tuple(k.split("/")): n for k, n in unknown.items()}
        async def count_attempts(self, state):
            return sum(unknown.values())

    m = Metrics()
    for _ in range(created):
        m.job_created()
    m.attempts_in_flight.inc(in_flight)
    asyncio.run(m.refresh(Store()))
    sys.stdout.write(m.render()[0].decode() + "\\n--end--\\n")
    sys.stdout.flush()
    if sys.stdin.readline().strip() == "end":
        m.process_ended()
    else:
        time.sleep(60)
    """
)
TIMEOUT = 30.0


class Child:
    """One process of the shared directory."""

    def __init__(self, shared: Path, created: int, in_flight: int, unknown: str) -> None:
        env = {**os.environ, MULTIPROC_DIR_ENV: str(shared)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(created), str(in_flight), unknown],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        assert self.proc.stdout is not None
        lines: list[str] = []
        while (line := self.proc.stdout.readline()) and line != "--end--\n":
            lines.append(line)
        assert line, f"the child ended early ({self.proc.wait(TIMEOUT)})"
        self.scrape = values("".join(lines))

    def end(self) -> None:
        self.proc.communicate("end\n", timeout=TIMEOUT)
        assert self.proc.returncode == 0

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate(timeout=TIMEOUT)


def values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Return {(sample name, sorted labels): value} of an exposition text."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


CREATED = ("onejob_jobs_created_total", ())
IN_FLIGHT = ("onejob_attempts_in_flight", ())
UNKNOWN = ("onejob_attempts_unknown", ())


def by_age(provider: str, age: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return ("onejob_attempts_unknown_by_age", (("age", age), ("provider", provider)))


def test_a_scrape_of_any_process_adds_up_all_of_them(tmp_path: Path) -> None:
    first = Child(tmp_path, 3, 2, '{"sim-openai/lt_1m": 4}')
    try:
        second = Child(tmp_path, 2, 1, '{"sim-openai/lt_10m": 1}')
        try:
            # Counters and live gauges add up; a gauge read from the database takes the
            # latest refresh, and the bucket that emptied since shows 0, not its old 4.
            assert second.scrape[CREATED] == 5.0
            assert second.scrape[IN_FLIGHT] == 3.0
            assert second.scrape[UNKNOWN] == 1.0
            assert second.scrape[by_age("sim-openai", "lt_10m")] == 1.0
            assert second.scrape[by_age("sim-openai", "lt_1m")] == 0.0
            first.kill()  # as a crashed worker: its in-flight attempts leave the sum
            third = Child(tmp_path, 0, 0, "{}")
            third.end()
            assert third.scrape[CREATED] == 5.0  # a dead process's counts stay counted
            assert third.scrape[IN_FLIGHT] == 1.0
            assert third.scrape[UNKNOWN] == 0.0
            assert third.scrape[by_age("sim-openai", "lt_10m")] == 0.0
        finally:
            second.end()  # a clean end says so itself
        last = Child(tmp_path, 0, 0, "{}")
        last.end()
        assert last.scrape[IN_FLIGHT] == 0.0
        assert last.scrape[CREATED] == 5.0
    finally:
        if first.proc.poll() is None:
            first.kill()


def test_one_process_alone_counts_on_its_own_registry() -> None:
    class Store:
        def __init__(self) -> None:
            self.unknown: dict[tuple[str, str], int] = {("sim-openai", "lt_1m"): 4}

        async def unknown_by_provider_and_age(
            self, bounds: object, older: object
        ) -> dict[tuple[str, str], int]:
            return self.unknown

        async def count_attempts(self, state: object) -> int:
            return sum(self.unknown.values())

    assert MULTIPROC_DIR_ENV not in os.environ  # the test run itself is one process each
    one, other = Metrics(), Metrics()
    one.job_created()
    store = Store()
    asyncio.run(one.refresh(store))
    assert values(one.render()[0].decode())[by_age("sim-openai", "lt_1m")] == 4.0
    store.unknown = {}
    asyncio.run(one.refresh(store))
    shown = values(one.render()[0].decode())
    assert shown[by_age("sim-openai", "lt_1m")] == 0.0
    assert shown[CREATED] == 1.0
    assert values(other.render()[0].decode())[CREATED] == 0.0


def test_a_directory_the_operator_names_is_emptied_of_the_last_run_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.server import _shared_metrics_dir

    named = tmp_path / "metrics"
    named.mkdir()
    (named / "counter_4242.db").write_bytes(b"stale")
    (named / "notes.txt").write_text("not ours")
    monkeypatch.setenv(MULTIPROC_DIR_ENV, str(named))
    with _shared_metrics_dir():
        assert sorted(p.name for p in named.iterdir()) == ["notes.txt"]
    assert named.is_dir() and os.environ[MULTIPROC_DIR_ENV] == str(named)
    monkeypatch.delenv(MULTIPROC_DIR_ENV)
    with _shared_metrics_dir():
        ours = Path(os.environ[MULTIPROC_DIR_ENV])
        assert ours.is_dir() and not any(ours.iterdir())
    assert MULTIPROC_DIR_ENV not in os.environ and not ours.exists()
