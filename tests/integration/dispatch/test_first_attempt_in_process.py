"""The fast path: a new job's first attempt runs in the process that created it.

Real ``onejob serve`` processes on SQLite and PostgreSQL: a SIGKILL mid-call still ends as
``unknown`` through the lease (never re-run), a double click spread over two processes
makes one provider call, a waiter answers when its attempt loses, ``--workers 2`` keeps
one job per key.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from dispatch_harness import (
    CONTRACT,
    Api,
    SimControl,
    case_input,
    eventually,
    free_port,
    run_gateway,
    sim_settings,
    write_config,
)
from prometheus_client.parser import text_string_to_metric_families

from gateway.settings import DatabaseConfig, Settings, ShortcutsConfig
from gateway.store import open_store
from providers.simulator.server import RunningSimulator

pytestmark = [pytest.mark.slow, pytest.mark.shortcut]

ROOT = Path(__file__).resolve().parents[3]
EXIT_TIMEOUT = 15.0  # seconds
READY_TIMEOUT = 60.0  # seconds


class Processes:
    """Spawn ``onejob serve`` / ``onejob worker`` processes; kill leftovers at the end."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, *args: str) -> subprocess.Popen[bytes]:
        n = len(self.procs)
        with open(self.tmp_path / f"proc-{n}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "cli", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env={**os.environ, "ONEJOB_LOG_LEVEL": "INFO"},
                start_new_session=True,  # its own group: cleanup kills --workers children too
            )
        self.procs.append(proc)
        return proc

    def log(self, index: int) -> str:
        return (self.tmp_path / f"proc-{index}.log").read_text(errors="replace")

    async def serve(self, config: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
        """Start a gateway and wait until it answers; return it and its base URL."""
        port = free_port()
        proc = self.spawn("serve", "--config", str(config), "--port", str(port), *extra)
        base = f"http://127.0.0.1:{port}"
        deadline = asyncio.get_running_loop().time() + READY_TIMEOUT
        async with httpx.AsyncClient(timeout=2.0) as client:
            while True:
                if proc.poll() is not None:
                    raise AssertionError(f"gateway exited:\n{self.log(len(self.procs) - 1)}")
                try:
                    if (await client.get(f"{base}/healthz")).status_code == 200:
                        return proc, base
                except httpx.HTTPError:
                    pass
                if asyncio.get_running_loop().time() > deadline:
                    raise AssertionError("gateway never became ready")
                await asyncio.sleep(0.1)

    def cleanup(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(EXIT_TIMEOUT)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Processes]:
    p = Processes(tmp_path)
    try:
        yield p
    finally:
        p.cleanup()


def headers(key: str, idem: str, wait: int | None = None) -> dict[str, str]:
    h = {"Authorization": f"Bearer {key}", "Idempotency-Key": idem}
    if wait is not None:
        h["Prefer"] = f"wait={wait}"
    return h


def body(index: int = 0) -> dict[str, Any]:
    return {"contract": CONTRACT, "input": case_input(index)}


async def test_sigkilled_gateway_leaves_its_in_process_first_attempt_unknown_never_rerun(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    keys: tuple[str, str],
    tmp_path: Path,
    procs: Processes,
) -> None:
    settings = sim_settings(
        sim,
        database_url,
        tmp_path / "certs.json",
        primary_timeout=60.0,
        dispatcher={"runners": 2, "lease_ttl": 1.0, "reap_interval": 0.2, "poll_interval": 0.2},
    )
    config = write_config(tmp_path / "onejob.toml", settings)
    await sim_control.script("sim-openai", {"kind": "hang"})
    # One process, so the SIGKILL below is the process that runs the attempt (on
    # PostgreSQL the default is one worker per CPU, under a supervisor).
    victim, base = await procs.serve(config, "--workers", "1")
    async with httpx.AsyncClient(base_url=base, timeout=10.0) as client:
        created = await client.post("/v1/jobs", json=body(), headers=headers(keys[0], "crash-1"))
    assert created.status_code == 201, created.text
    job = created.json()
    # Claimed in the creating transaction: the 201 already shows it running.
    assert job["status"] == "running"
    assert job["attempts"][0]["state"] == "running"

    async def one_call() -> bool:
        return len(await sim_control.calls("sim-openai")) == 1

    await eventually(one_call, 20.0, "the in-process runner to call the provider")
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(EXIT_TIMEOUT) == -signal.SIGKILL

    procs.spawn("worker", "--config", str(config))  # a reaper elsewhere
    store = await open_store(
        database_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:

        async def reaped() -> bool:
            j = await store.get_job(job["id"])
            return j is not None and j.attempts[0].state.value == "unknown"

        await eventually(reaped, 20.0, "the reaper to turn the attempt unknown")
        await asyncio.sleep(1.0)  # time for a wrong worker to re-run it or fail over
        final = await store.get_job(job["id"])
        assert final is not None
        [attempt] = final.attempts
        assert attempt.state.value == "unknown"
        assert attempt.error is not None and attempt.error["reason"] == "lease_expired"
        assert final.status.value == "unknown"
        events = [(e.kind, e.detail) for e in await store.events(job["id"])]
    finally:
        await store.close()
    running = [d for kind, d in events if kind == "attempt_running"]
    assert [(d["read_version"], d["in_process"]) for d in running] == [(1, True)]
    assert running[0]["worker"] == f"gw-{victim.pid}"  # the killed gateway held it
    calls = await sim_control.calls()
    assert [c["idempotency_key"] for c in calls] == [f"{job['id']}/1"]


async def test_fifty_clicks_over_two_gateway_processes_make_one_job_and_one_provider_call(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    keys: tuple[str, str],
    tmp_path: Path,
    procs: Processes,
) -> None:
    for n in range(2):
        settings = sim_settings(
            sim, database_url, tmp_path / "certs.json", instance_id=f"gw-click-{n}"
        )
        write_config(tmp_path / f"onejob-{n}.toml", settings)
    await sim_control.script("sim-openai", {"kind": "delay", "seconds": 0.5})
    (_, base_a), (_, base_b) = [await procs.serve(tmp_path / f"onejob-{n}.toml") for n in range(2)]
    limits = httpx.Limits(max_connections=60)
    async with httpx.AsyncClient(timeout=30.0, limits=limits) as client:

        async def click(n: int) -> httpx.Response:
            base = base_a if n % 2 else base_b
            return await client.post(
                f"{base}/v1/jobs", json=body(3), headers=headers(keys[0], "fifty", wait=20)
            )

        answers = await asyncio.gather(*(click(n) for n in range(50)))
    assert sorted({r.status_code for r in answers}) == [200, 201], [r.text for r in answers]
    assert [r.status_code for r in answers].count(201) == 1
    assert len({r.json()["id"] for r in answers}) == 1
    assert {r.json()["status"] for r in answers} == {"succeeded"}
    job_id = answers[0].json()["id"]
    calls = await sim_control.calls()
    assert [c["idempotency_key"] for c in calls] == [f"{job_id}/1"]


async def test_a_waiter_answers_at_once_when_its_in_process_attempt_loses_to_a_cancel(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    keys: tuple[str, str],
    cert_path: Path,
) -> None:
    settings = sim_settings(sim, database_url, cert_path, primary_timeout=30.0)
    await sim_control.script("sim-openai", {"kind": "delay", "seconds": 3.0})
    async with run_gateway(settings) as gw:
        api = Api(gw, *keys)
        waiting = asyncio.create_task(api.create(case_input(1), key="lose-1", wait=20))

        async def sent() -> bool:
            return len(await sim_control.calls("sim-openai")) == 1

        await eventually(sent, 10.0, "the in-process attempt to call the provider")
        [call] = await sim_control.calls("sim-openai")
        job_id = call["idempotency_key"].split("/")[0]
        cancel = await gw.client.post(f"/v1/jobs/{job_id}/cancel", headers=api.auth)
        assert cancel.status_code == 200, cancel.text
        answered = await waiting
        # The waiter answered with the cancelled job while the provider was still busy:
        # its own attempt had not finished (so it was still running when it answered).
        assert answered.status_code == 201
        job = answered.json()
        assert job["status"] == "cancelled"
        assert job["attempts"][0]["state"] == "running"

        later = await api.until(job_id, lambda j: j["attempts"][0]["state"] == "lost")
        assert later["status"] == "cancelled" and later["result"] is None
        events = (await gw.client.get(f"/v1/jobs/{job_id}/events", headers=api.auth)).json()
        assert "race_lost" in [e["kind"] for e in events["events"]]
    assert len(await sim_control.calls()) == 1


async def test_two_workers_serve_one_job_per_key(
    sim: RunningSimulator,
    sim_control: SimControl,
    database_url: str,
    keys: tuple[str, str],
    tmp_path: Path,
    procs: Processes,
) -> None:
    settings: Settings = sim_settings(sim, database_url, tmp_path / "certs.json")
    config = write_config(tmp_path / "onejob.toml", settings)
    supervisor, base = await procs.serve(config, "--workers", "2")

    async def two_dispatchers() -> bool:
        return procs.log(0).count('"msg": "dispatcher started"') == 2

    await eventually(two_dispatchers, 30.0, "both workers to start their dispatchers")
    limits = httpx.Limits(max_connections=40)
    async with httpx.AsyncClient(base_url=base, timeout=30.0, limits=limits) as client:

        async def click(key: str, n: int) -> httpx.Response:
            return await client.post("/v1/jobs", json=body(n), headers=headers(keys[0], key, 20))

        answers = await asyncio.gather(
            *(click(f"key-{n % 5}", n % 5) for n in range(40)), return_exceptions=False
        )
    by_key: dict[str, set[str]] = {}
    for r in answers:
        assert r.status_code in (200, 201), r.text
        by_key.setdefault(r.json()["idempotency_key"], set()).add(r.json()["id"])
        assert r.json()["status"] == "succeeded"
    assert {k: len(v) for k, v in by_key.items()} == {f"key-{n}": 1 for n in range(5)}
    calls = await sim_control.calls()
    assert sorted(c["idempotency_key"] for c in calls) == sorted(
        f"{next(iter(ids))}/1" for ids in by_key.values()
    )
    # Whichever worker a scrape reaches, it shows both workers' counts (gateway.metrics).
    for _ in range(8):
        async with httpx.AsyncClient(base_url=base, timeout=10.0) as fresh_connection:
            scrape = (await fresh_connection.get("/metrics")).text
        shown = {
            (s.name, s.labels.get("outcome")): s.value
            for family in text_string_to_metric_families(scrape)
            for s in family.samples
        }
        assert shown[("onejob_jobs_created_total", None)] == 5.0, scrape
        assert shown[("onejob_jobs_replayed_total", None)] == 35.0, scrape
        assert shown[("onejob_attempts_total", "succeeded")] == 5.0, scrape
        assert shown[("onejob_attempts_in_flight", None)] == 0.0, scrape
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(EXIT_TIMEOUT) == 0, procs.log(0)
