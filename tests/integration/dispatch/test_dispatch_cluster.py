"""Several processes on one PostgreSQL behave as one: every attempt runs exactly once (R7)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
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
    certify,
    free_port,
    sim_settings,
    write_config,
)

from gateway.domain.states import AttemptState, JobStatus
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import open_store
from providers.simulator.server import RunningSimulator

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

JOBS = 200
CLIENT_CONCURRENCY = 20  # requests in flight at once
READY_TIMEOUT = 30.0  # seconds for a served gateway to answer /healthz
EXIT_TIMEOUT = 20.0  # seconds
ROOT = Path(__file__).resolve().parents[3]


@contextlib.contextmanager
def processes(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(EXIT_TIMEOUT)


CLI = ("-c", "from cli.main import main; raise SystemExit(main())")


def spawn(procs: list[subprocess.Popen[bytes]], log: Path, *args: str) -> None:
    with open(log, "wb") as out:
        procs.append(
            subprocess.Popen(
                [sys.executable, *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env={**os.environ, "ONEJOB_LOG_LEVEL": "WARNING"},
            )
        )


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:]


async def ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = asyncio.get_running_loop().time() + READY_TIMEOUT
    async with httpx.AsyncClient(timeout=2.0) as client:
        while asyncio.get_running_loop().time() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"gateway exited: {tail(log)}")
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"{url}/healthz")).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise AssertionError(f"gateway at {url} never became ready")


async def test_two_served_gateways_run_every_attempt_exactly_once_with_one_winner_per_job(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    tmp_path: Path,
    keys: tuple[str, str],
) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("several processes on one database is the PostgreSQL deployment")
    settings = sim_settings(
        sim, database_url, tmp_path / "certs.json", dispatcher={"runners": 4, "poll_interval": 1.0}
    )
    certify(tmp_path / "certs.json", list(settings.providers.values()))
    config = write_config(tmp_path / "onejob.toml", settings)
    urls = []
    with processes(tmp_path) as procs:
        for i in range(2):
            port = free_port()
            log = tmp_path / f"serve-{i}.log"
            spawn(procs, log, *CLI, "serve", "--config", str(config), "--port", str(port))
            urls.append((f"http://127.0.0.1:{port}", procs[-1], log))
        for url, proc, log in urls:
            await ready(url, proc, log)

        gate = asyncio.Semaphore(CLIENT_CONCURRENCY)
        auth = {"Authorization": f"Bearer {keys[0]}"}

        async def create(client: httpx.AsyncClient, n: int) -> dict[str, object]:
            base = urls[n % 2][0]
            async with gate:
                r = await client.post(
                    f"{base}/v1/jobs",
                    json={"contract": CONTRACT, "input": case_input(n)},
                    headers={**auth, "Idempotency-Key": f"cluster-{n}", "Prefer": "wait=30"},
                )
            assert r.status_code == 201, r.text
            body: dict[str, object] = r.json()
            return body

        async with httpx.AsyncClient(timeout=60.0) as client:
            created = await asyncio.gather(*(create(client, n) for n in range(JOBS)))

    assert len({j["id"] for j in created}) == JOBS
    assert collections.Counter(j["status"] for j in created) == {"succeeded": JOBS}
    calls = await sim_control.calls()
    per_key = collections.Counter(c["idempotency_key"] for c in calls)
    assert len(calls) == JOBS
    assert set(per_key.values()) == {1}
    assert set(per_key) == {f"{j['id']}/1" for j in created}
    store = await open_store(
        database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        lease_owners = set()
        for body in created:
            job = await store.get_job(str(body["id"]))
            assert job is not None and job.status is JobStatus.SUCCEEDED
            winners = [a for a in job.attempts if a.state is AttemptState.SUCCEEDED]
            assert len(winners) == 1 and job.completed_by == winners[0].id
            assert len(job.attempts) == 1
            lease_owners.add(winners[0].lease_owner)
    finally:
        await store.close()
    assert len(lease_owners) >= 2  # the work really was shared between processes
