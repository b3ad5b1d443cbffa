"""The job event stream follows a decision another process makes (issue 39).

One gateway serves the stream with its dispatcher off; a separate ``onejob worker`` process
claims the attempt, calls the provider and decides the job. The stream carries the other
process's events as they happen (PostgreSQL: its NOTIFY; SQLite: the stream's re-read),
ends when the job is decided, and a client that resumes with ``Last-Event-ID`` gets each
later event once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from dispatch_harness import (
    Api,
    case_input,
    certify,
    eventually,
    run_gateway,
    sim_settings,
    write_config,
)

from providers.simulator.server import RunningSimulator

pytestmark = pytest.mark.slow

STREAM = {"Accept": "text/event-stream"}
EXIT_TIMEOUT = 15.0  # seconds


async def messages(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Decode Server-Sent Events as they arrive (``data`` parsed as JSON)."""
    message: dict[str, Any] = {}
    async for line in response.aiter_lines():
        if not line:
            if message:
                yield message
            message = {}
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            message[field] = json.loads(value) if field == "data" else value


def spawn_worker(config: Path, log_path: Path) -> subprocess.Popen[bytes]:
    """Start ``python -m cli worker`` (``onejob worker``) on ``config``."""
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "cli", "worker", "--config", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=Path(__file__).resolve().parents[3],
            env={**os.environ, "ONEJOB_LOG_LEVEL": "INFO"},
        )


def stop(worker: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after ``EXIT_TIMEOUT``."""
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(EXIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait(EXIT_TIMEOUT)


async def test_the_stream_carries_a_decision_made_by_a_worker_process_and_resumes_once(
    sim: RunningSimulator,
    database_url: str,
    keys: tuple[str, str],
    tmp_path: Path,
) -> None:
    certs = tmp_path / "certs.json"
    worker_settings = sim_settings(sim, database_url, certs, instance_id="worker-process")
    certify(certs, list(worker_settings.providers.values()))
    config = write_config(tmp_path / "worker.toml", worker_settings)
    # The gateway under test only serves HTTP: every decision comes from the worker.
    served = worker_settings.model_copy(
        update={
            "instance_id": "stream-gateway",
            "dispatcher": worker_settings.dispatcher.model_copy(update={"enabled": False}),
        }
    )
    log_path = tmp_path / "worker.log"
    async with run_gateway(served) as gw:
        api = Api(gw, *keys)
        made = await api.create(case_input(0), key="across-processes")
        assert made.status_code == 201, made.text
        job_id = made.json()["id"]
        seen: list[dict[str, Any]] = []
        opened = asyncio.Event()

        async def follow() -> None:
            url = f"/v1/jobs/{job_id}/events"
            async with gw.client.stream("GET", url, headers={**api.auth, **STREAM}) as r:
                assert r.status_code == 200
                async for message in messages(r):
                    seen.append(message)
                    opened.set()

        following = asyncio.create_task(follow())
        await asyncio.wait_for(opened.wait(), 10)
        assert seen[-1].get("event") == "job" or "id" in seen[-1]
        worker = spawn_worker(config, log_path)
        try:
            await asyncio.wait_for(following, 30)
        finally:
            stop(worker)
        worker_log = log_path.read_text(encoding="utf-8", errors="replace")

        # The stream ended on its own, with the job the worker decided.
        jobs = [m["data"] for m in seen if m.get("event") == "job"]
        assert jobs[-1]["status"] == "succeeded", (seen, worker_log)
        assert jobs[0]["status"] != "succeeded"
        kinds = [m["event"] for m in seen if "id" in m]
        assert "attempt_succeeded" in kinds or "job_succeeded" in kinds, kinds
        ids = [m["id"] for m in seen if "id" in m]
        assert len(ids) == len(set(ids))

        # A client that saw only the first event resumes after it: each later event once.
        first = ids[0]
        async with gw.client.stream(
            "GET",
            f"/v1/jobs/{job_id}/events",
            headers={**api.auth, **STREAM, "Last-Event-ID": first},
        ) as again:
            resumed = [m async for m in messages(again)]
        assert [m["id"] for m in resumed if "id" in m] == ids[1:]
        assert [m["data"]["status"] for m in resumed if m.get("event") == "job"][-1] == (
            "succeeded"
        )

        async def decided_by_worker() -> bool:
            body = (await api.job(job_id)).json()
            return bool(body["status"] == "succeeded")

        await eventually(decided_by_worker, 5.0, "the job to read as succeeded")
