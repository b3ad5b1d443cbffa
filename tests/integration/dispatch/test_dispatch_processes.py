"""Real worker processes: SIGKILL mid-call leaves the attempt unknown, never re-run."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from dispatch_harness import (
    CONTRACT,
    SimControl,
    case_input,
    eventually,
    free_port,
    sim_settings,
    write_config,
)

from gateway.domain.fingerprint import fingerprint
from gateway.domain.records import NewJob
from gateway.domain.states import AttemptState, JobStatus
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import open_store
from providers.simulator.server import RunningSimulator

pytestmark = pytest.mark.slow

PROCESS_EXIT_TIMEOUT = 15.0  # seconds


class Workers:
    """Spawn ``python -m cli worker`` processes; kill leftovers at the end."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, config: Path, *extra: str, cli: bool = False) -> subprocess.Popen[bytes]:
        """Start a worker: ``python -m cli worker``, or ``cli.main.main`` (``cli``)."""
        entry = (
            ["-c", "from cli.main import main; raise SystemExit(main())", "worker"]
            if cli
            else ["-m", "cli", "worker"]
        )
        n = len(self.procs)
        with open(self.tmp_path / f"worker-{n}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, *entry, "--config", str(config), *extra],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=Path(__file__).resolve().parents[3],
                env={**os.environ, "ONEJOB_LOG_LEVEL": "INFO"},
            )
        self.procs.append(proc)
        return proc

    def log(self, index: int) -> str:
        return (self.tmp_path / f"worker-{index}.log").read_text(encoding="utf-8", errors="replace")

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(PROCESS_EXIT_TIMEOUT)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    w = Workers(tmp_path)
    try:
        yield w
    finally:
        w.cleanup()


async def test_sigkilled_worker_leaves_its_attempt_unknown_after_the_lease_and_never_rerun(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    tmp_path: Path,
    workers: Workers,
) -> None:
    settings = sim_settings(
        sim,
        database_url,
        tmp_path / "certs.json",
        primary_timeout=60.0,
        dispatcher={"runners": 1, "lease_ttl": 1.0, "reap_interval": 0.2, "poll_interval": 0.2},
    )
    config = write_config(tmp_path / "onejob.toml", settings)
    await sim_control.script("sim-openai", {"kind": "hang"})
    store = await open_store(
        database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        victim = workers.spawn(config)
        inp = case_input(0)
        created = await store.create_or_get(
            NewJob(
                owner_id="alice",
                idempotency_key="crash-1",
                fingerprint=fingerprint(CONTRACT, inp, None),
                contract=CONTRACT,
                provider="sim-openai",
                requested_provider=None,
                input=inp,
            )
        )
        job_id = created.job.id

        async def one_call() -> bool:
            return len(await sim_control.calls("sim-openai")) == 1

        await eventually(one_call, 20.0, "the worker to call the provider")
        job = await store.get_job(job_id)
        assert job is not None
        assert job.attempts[0].state is AttemptState.RUNNING

        victim.send_signal(signal.SIGKILL)
        assert victim.wait(PROCESS_EXIT_TIMEOUT) == -signal.SIGKILL

        job = await store.get_job(job_id)
        assert job is not None and job.attempts[0].state is AttemptState.RUNNING  # lease held

        metrics_port = free_port()
        # `onejob worker` this time, with its metrics on a side port.
        reaper = workers.spawn(config, "--metrics-port", str(metrics_port), cli=True)

        async def reaped() -> bool:
            j = await store.get_job(job_id)
            return j is not None and j.attempts[0].state is AttemptState.UNKNOWN

        await eventually(reaped, 15.0, "the reaper to turn the attempt unknown")
        await asyncio.sleep(1.0)  # time for a wrong worker to re-run or fail over
        job = await store.get_job(job_id)
        assert job is not None
        [attempt] = job.attempts
        assert attempt.state is AttemptState.UNKNOWN
        assert attempt.error is not None and attempt.error["reason"] == "lease_expired"
        assert job.status is JobStatus.UNKNOWN
        calls = await sim_control.calls()
        assert [c["idempotency_key"] for c in calls] == [f"{job_id}/1"]

        async with httpx.AsyncClient(timeout=5.0) as client:
            scraped = (await client.get(f"http://127.0.0.1:{metrics_port}/metrics")).text
        assert 'onejob_attempts_total{outcome="unknown",provider="sim-openai"} 1.0' in scraped
        assert "onejob_attempts_unknown 1.0" in scraped

        reaper.send_signal(signal.SIGTERM)
        assert reaper.wait(PROCESS_EXIT_TIMEOUT) == 0, workers.log(1)
        assert "worker started" in workers.log(1)
    finally:
        await store.close()


async def test_worker_refuses_a_database_that_is_not_migrated(
    sim: RunningSimulator,
    tmp_path: Path,
    workers: Workers,
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
    config = write_config(tmp_path / "onejob.toml", sim_settings(sim, url, tmp_path / "c.json"))
    proc = workers.spawn(config)

    assert proc.wait(PROCESS_EXIT_TIMEOUT) == 2
    assert "onejob db upgrade" in workers.log(0)


async def test_a_job_created_elsewhere_wakes_a_postgres_worker_at_once_not_at_its_poll(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    tmp_path: Path,
    workers: Workers,
) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("cross-process wake-ups are PostgreSQL LISTEN/NOTIFY; SQLite polls")
    settings = sim_settings(
        sim, database_url, tmp_path / "certs.json", dispatcher={"runners": 2, "poll_interval": 30.0}
    )
    worker = workers.spawn(write_config(tmp_path / "onejob.toml", settings))

    async def started() -> bool:
        return "worker started" in workers.log(0)

    await eventually(started, 20.0, "the worker to start")
    await asyncio.sleep(1.0)  # its first claims found nothing; it now sleeps on the hub
    store = await open_store(
        database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        inp = case_input(2)
        created = await store.create_or_get(
            NewJob(
                owner_id="alice",
                idempotency_key="wake-1",
                fingerprint=fingerprint(CONTRACT, inp, None),
                contract=CONTRACT,
                provider="sim-openai",
                requested_provider=None,
                input=inp,
            )
        )
        began = asyncio.get_running_loop().time()

        async def succeeded() -> bool:
            j = await store.get_job(created.job.id)
            return j is not None and j.status is JobStatus.SUCCEEDED

        await eventually(succeeded, 10.0, "the worker to run the job")
        assert asyncio.get_running_loop().time() - began < 5.0  # far below poll_interval
    finally:
        await store.close()
    assert worker.poll() is None
