"""Spans exported over OTLP/HTTP to a loopback receiver that decodes them with
``opentelemetry-proto``: a job created with a ``traceparent`` is followed, in the caller's
trace, from the HTTP request to the job, its attempts and their provider calls, also
when a worker process runs the attempt later (docs/telemetry.md)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dispatch_harness import (
    CONTRACT,
    Api,
    case_input,
    certify,
    eventually,
    open_sim_control,
    run_gateway,
    sim_settings,
    write_config,
)
from otlp_receiver import SERVICE, Receiver, Span

from gateway.domain.trace_context import job_span_id
from gateway.settings import Settings
from gateway.tracing import TelemetryConfig
from providers.simulator.server import RunningSimulator

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = "00f067aa0ba902b7"  # the caller's span: the request's parent
TRACEPARENT = f"00-{TRACE}-{CALLER}-01"
GENAI = (
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.response.id",
    "gen_ai.response.finish_reasons",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
)


def traced(settings: Settings, **dispatcher: Any) -> Settings:
    update: dict[str, Any] = {"telemetry": TelemetryConfig(enabled=True)}
    if dispatcher:
        update["dispatcher"] = settings.dispatcher.model_copy(update=dispatcher)
    return settings.model_copy(update=update)


def headers(api: Api, key: str, **more: str) -> dict[str, str]:
    return {**api.auth, "Idempotency-Key": key, "traceparent": TRACEPARENT, **more}


def spawn_worker(config: Path, log_path: Path) -> subprocess.Popen[bytes]:
    """Start ``onejob worker`` in a process of its own; ``OTEL_*`` point at the receiver."""
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "cli", "worker", "--config", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=dict(os.environ),
        )


def named(spans: list[Span], name: str) -> list[Span]:
    return [s for s in spans if s.name == name]


def one(spans: list[Span], name: str, **attributes: Any) -> Span:
    found = [
        s
        for s in named(spans, name)
        if all(s.attributes.get(k) == v for k, v in attributes.items())
    ]
    assert len(found) == 1, (name, attributes, [(s.name, s.attributes) for s in spans])
    return found[0]


def has(*names: str, count: int = 1) -> Any:
    def holds(spans: list[Span]) -> bool:
        mine = [s for s in spans if s.trace_id == TRACE]
        return all(len(named(mine, n)) >= count for n in names)

    return holds


async def test_a_job_created_with_a_traceparent_is_traced_from_the_request_to_the_provider(
    sim: RunningSimulator,
    database_url: str,
    keys: tuple[str, str],
    tmp_path: Path,
    receiver: Receiver,
) -> None:
    settings = traced(sim_settings(sim, database_url, tmp_path / "certs.json"))
    async with run_gateway(settings) as gw, open_sim_control(sim) as control:
        api = Api(gw, *keys)
        body = {"contract": CONTRACT, "input": case_input(0)}
        sent = headers(api, "traced-1", tracestate="vendor=abc", Prefer="wait=10")
        created = await gw.client.post("/v1/jobs", json=body, headers=sent)
        assert created.status_code == 201, created.text
        job = created.json()
        assert job["status"] == "succeeded", job
        trace = job["trace"]
        assert trace["trace_id"] == TRACE and trace["tracestate"] == "vendor=abc"
        server_id = trace["traceparent"][36:52]  # the request's span: the job's parent
        assert trace["traceparent"] == f"00-{TRACE}-{server_id}-01" and server_id != CALLER
        replayed = await gw.client.post("/v1/jobs", json=body, headers=sent)
        assert replayed.status_code == 200 and replayed.json()["trace"] == trace
        called = await control.calls("sim-openai")
    spans = receiver.wait_for(has("onejob.job", "onejob.attempt", "chat sim-gpt"))
    mine = receiver.in_trace(TRACE)

    request = one(mine, "POST /v1/jobs", **{"onejob.replayed": False})
    assert request.kind == "SERVER" and request.parent_span_id == CALLER
    assert request.span_id == server_id
    assert request.attributes["onejob.job.id"] == job["id"]
    assert request.attributes["http.response.status_code"] == 201
    again = one(mine, "POST /v1/jobs", **{"onejob.replayed": True})
    assert again.parent_span_id == CALLER and again.attributes["onejob.job.id"] == job["id"]

    job_span = one(mine, "onejob.job")
    assert job_span.span_id == f"{job_span_id(job['id']):016x}"
    assert job_span.parent_span_id == server_id
    assert job_span.attributes["onejob.job.id"] == job["id"]
    assert job_span.attributes["onejob.job.status"] == "succeeded"
    assert job_span.start_ns <= request.end_ns  # it starts at the job's created_at

    attempt = one(mine, "onejob.attempt")
    assert attempt.parent_span_id == job_span.span_id
    assert attempt.attributes["onejob.job.id"] == job["id"]
    assert attempt.attributes["onejob.attempt.number"] == 1
    assert attempt.attributes["onejob.attempt.reason"] == "initial"
    assert attempt.attributes["onejob.cas.outcome"] == "won"

    call = one(mine, "chat sim-gpt")
    assert call.kind == "CLIENT" and call.parent_span_id == attempt.span_id
    missing = [k for k in GENAI if k not in call.attributes]
    assert not missing, (missing, call.attributes)
    assert call.attributes["gen_ai.operation.name"] == "chat"
    assert call.attributes["gen_ai.provider.name"] == "openai"
    assert call.attributes["gen_ai.request.model"] == "sim-gpt"
    assert call.attributes["gen_ai.usage.input_tokens"] > 0
    assert call.attributes["onejob.job.id"] == job["id"]
    assert "gen_ai.input.messages" not in call.attributes  # not captured unless configured
    # The provider got the call's own context: its trace, the CLIENT span as parent.
    assert [c["traceparent"] for c in called] == [f"00-{TRACE}-{call.span_id}-01"]

    assert {s.resource["service.name"] for s in spans} == {SERVICE}


async def test_a_failover_is_on_both_attempts_spans(
    sim: RunningSimulator,
    database_url: str,
    keys: tuple[str, str],
    tmp_path: Path,
    receiver: Receiver,
) -> None:
    settings = traced(sim_settings(sim, database_url, tmp_path / "certs.json"))
    certify(tmp_path / "certs.json", list(settings.providers.values()))
    async with run_gateway(settings) as gw, open_sim_control(sim) as control:
        await control.script("sim-openai", {"kind": "status", "code": 500})
        api = Api(gw, *keys)
        body = {"contract": CONTRACT, "input": case_input(1)}
        created = await gw.client.post(
            "/v1/jobs", json=body, headers=headers(api, "failover-1", Prefer="wait=10")
        )
        assert created.status_code == 201, created.text
        job = created.json()
        assert job["status"] == "succeeded" and len(job["attempts"]) == 2, job
    receiver.wait_for(has("onejob.attempt", count=2))
    receiver.wait_for(has("onejob.job", "chat sim-claude"))
    mine = receiver.in_trace(TRACE)
    first = one(mine, "onejob.attempt", **{"onejob.attempt.number": 1})
    assert first.attributes["onejob.attempt.outcome"] == "failed"
    assert first.attributes["onejob.failover.to"] == "sim-anthropic"
    assert first.attributes["onejob.failover.reason"] == "status_500"
    second = one(mine, "onejob.attempt", **{"onejob.attempt.number": 2})
    assert second.attributes["onejob.attempt.reason"] == "failover"
    assert second.attributes["onejob.failover"] is True
    assert second.attributes["onejob.cas.outcome"] == "won"
    job_span = one(mine, "onejob.job")
    assert first.parent_span_id == second.parent_span_id == job_span.span_id
    failed_call = one(mine, "chat sim-gpt")
    assert failed_call.attributes["error.type"] == "status_500"
    assert failed_call.status_code == 2  # ERROR
    assert one(mine, "chat sim-claude").attributes["gen_ai.provider.name"] == "anthropic"


async def test_an_attempt_a_worker_process_runs_later_lands_in_the_callers_trace(
    sim: RunningSimulator,
    database_url: str,
    keys: tuple[str, str],
    tmp_path: Path,
    receiver: Receiver,
) -> None:
    base = sim_settings(sim, database_url, tmp_path / "certs.json")
    gateway = traced(base, enabled=False)  # it leaves the job starting
    async with run_gateway(gateway) as gw:
        api = Api(gw, *keys)
        body = {"contract": CONTRACT, "input": case_input(2)}
        created = await gw.client.post("/v1/jobs", json=body, headers=headers(api, "later-1"))
        assert created.status_code == 201, created.text
        job = created.json()
        assert job["attempts"][0]["state"] == "starting", job
        server_id = job["trace"]["traceparent"][36:52]

        config = write_config(tmp_path / "worker.toml", traced(base))
        worker = spawn_worker(config, tmp_path / "worker.log")
        try:

            async def done() -> bool:
                answer = await api.job(job["id"])
                return bool(answer.json()["status"] == "succeeded")

            await eventually(done, 20.0, "the worker to run the job")
            worker.send_signal(signal.SIGTERM)  # exports what it still holds as it stops
            await asyncio.to_thread(worker.wait, 20)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait(10)
    receiver.wait_for(has("onejob.job", "onejob.attempt", "chat sim-gpt"))
    mine = receiver.in_trace(TRACE)
    request = one(mine, "POST /v1/jobs")
    job_span = one(mine, "onejob.job")
    attempt = one(mine, "onejob.attempt")
    call = one(mine, "chat sim-gpt")
    assert request.span_id == server_id and job_span.parent_span_id == server_id
    assert attempt.parent_span_id == job_span.span_id == f"{job_span_id(job['id']):016x}"
    assert call.parent_span_id == attempt.span_id
    # Emitted by another process than the one that answered the request.
    instance = "service.instance.id"
    assert attempt.resource[instance] == job_span.resource[instance]
    assert attempt.resource[instance] != request.resource[instance]
    assert attempt.resource["service.name"] == SERVICE


async def test_a_failover_after_an_operators_resolution_stays_in_the_callers_trace(
    sim: RunningSimulator,
    database_url: str,
    keys: tuple[str, str],
    tmp_path: Path,
    receiver: Receiver,
) -> None:
    settings = traced(sim_settings(sim, database_url, tmp_path / "certs.json", primary_timeout=0.5))
    certify(tmp_path / "certs.json", list(settings.providers.values()))
    async with run_gateway(settings) as gw, open_sim_control(sim) as control:
        await control.script("sim-openai", {"kind": "hang"})
        api = Api(gw, *keys)
        body = {"contract": CONTRACT, "input": case_input(3)}
        created = await gw.client.post("/v1/jobs", json=body, headers=headers(api, "resolved-1"))
        assert created.status_code == 201, created.text
        job = await api.until(created.json()["id"], lambda j: j["status"] == "unknown")
        resolved = await gw.client.post(
            f"/v1/admin/attempts/{job['attempts'][0]['id']}/resolve",
            json={"outcome": "failed", "note": "the provider says it never ran"},
            headers=api.admin,
        )
        assert resolved.status_code == 200, resolved.text
        await api.until(job["id"], lambda j: j["status"] == "succeeded")
    receiver.wait_for(has("onejob.attempt", count=2))
    receiver.wait_for(has("onejob.job", "chat sim-claude"))
    mine = receiver.in_trace(TRACE)
    job_span = one(mine, "onejob.job")
    unknown = one(mine, "onejob.attempt", **{"onejob.attempt.number": 1})
    assert unknown.attributes["onejob.unknown"] is True
    assert unknown.attributes["onejob.attempt.outcome"] == "unknown"
    after = one(mine, "onejob.attempt", **{"onejob.attempt.number": 2})
    assert after.attributes["onejob.attempt.reason"] == "failover"
    assert after.attributes["onejob.cas.outcome"] == "won"
    assert unknown.parent_span_id == after.parent_span_id == job_span.span_id
    assert job_span.attributes["onejob.job.status"] == "succeeded"
