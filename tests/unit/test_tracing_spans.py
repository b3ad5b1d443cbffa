"""What ``OtelTracing`` records, read from an in-memory exporter: the job's span with its
derived id, attempts as its children, the GenAI CLIENT span, content only when asked, and
certification runs marked as such."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from certify.results import Mode
from certify.runner import Runner
from contracts.loader import load_catalog
from gateway.domain.records import AttemptRecord, JobRecord
from gateway.domain.states import AttemptReason, AttemptState, JobStatus
from gateway.domain.trace_context import job_span_id, job_trace_id
from gateway.tracing import TelemetryConfig
from gateway.tracing_otel import OtelTracing
from providers.base import ProviderRequest, ProviderResult, Usage
from providers.config import ProviderConfig

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def job(traceparent: str | None = f"00-{TRACE}-{PARENT}-01") -> JobRecord:
    attempt = AttemptRecord(
        "att_1", "job_1", 1, "sim-openai", AttemptReason.INITIAL, AttemptState.SUCCEEDED,
        None, None, None, None, "job_1/1", None, None, T0, T0, T0,
    )  # fmt: skip
    return JobRecord(
        "job_1", "alice", "k", "fp", "ticket-triage@1", "sim-openai", None, {},
        JobStatus.SUCCEEDED, 2, "att_1", {}, None, T0, T0 + dt.timedelta(seconds=2),
        (attempt,), traceparent=traceparent,
    )  # fmt: skip


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[OtelTracing, InMemorySpanExporter]]:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    tracing = OtelTracing(TelemetryConfig(enabled=True))
    memory = InMemorySpanExporter()
    tracing.provider.add_span_processor(SimpleSpanProcessor(memory))
    yield tracing, memory
    tracing.shutdown()


def test_the_job_span_has_its_derived_id_and_the_attempt_and_call_are_its_descendants(
    traced: tuple[OtelTracing, InMemorySpanExporter],
) -> None:
    tracing, memory = traced
    the_job = job()
    request = ProviderRequest("system", "user", {}, "schema", "sim-gpt")
    with tracing.attempt(the_job, the_job.attempts[0]):
        call = tracing.provider_call("openai", request, **{"job.id": "job_1"})
        sent = call.outgoing(request, the_job.traceparent, "a=1")
        result = ProviderResult({}, "{}", "chatcmpl-1", Usage(10, 5), "stop", 0.1, "sim-gpt-1")
        call.ended(result, None, unknown=False)
    tracing.job_settled(the_job, decided_by="att_1")
    spans = {s.name: s for s in memory.get_finished_spans()}
    job_span, attempt, client = spans["onejob.job"], spans["onejob.attempt"], spans["chat sim-gpt"]
    assert f"{job_span.context.trace_id:032x}" == TRACE
    assert job_span.context.span_id == job_span_id("job_1")
    assert f"{job_span.parent.span_id:016x}" == PARENT
    assert job_span.start_time == int(T0.timestamp() * 1e9)
    assert job_span.end_time - job_span.start_time == 2_000_000_000
    assert attempt.parent.span_id == job_span.context.span_id
    assert client.kind is SpanKind.CLIENT and client.parent.span_id == attempt.context.span_id
    assert client.attributes["gen_ai.provider.name"] == "openai"
    assert client.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert client.attributes["gen_ai.usage.output_tokens"] == 5
    assert "gen_ai.input.messages" not in client.attributes
    assert sent.traceparent == f"00-{TRACE}-{client.context.span_id:016x}-01"
    assert sent.tracestate == "a=1"


def test_a_job_created_with_no_context_gets_a_trace_derived_from_its_id(
    traced: tuple[OtelTracing, InMemorySpanExporter],
) -> None:
    tracing, memory = traced
    the_job = job(None)
    with tracing.attempt(the_job, the_job.attempts[0]):
        pass
    tracing.job_settled(the_job)
    spans = {s.name: s for s in memory.get_finished_spans()}
    assert spans["onejob.job"].context.trace_id == job_trace_id("job_1")
    assert spans["onejob.attempt"].context.trace_id == job_trace_id("job_1")
    assert spans["onejob.job"].parent is None


def test_prompts_and_outputs_are_recorded_only_when_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    tracing = OtelTracing(TelemetryConfig(enabled=True, capture_content=True))
    memory = InMemorySpanExporter()
    tracing.provider.add_span_processor(SimpleSpanProcessor(memory))
    call = tracing.provider_call("gemini", ProviderRequest("be brief", "hello", {}, "s", "m"))
    call.ended(ProviderResult({}, "hi", None, Usage(), None, 0.1), None, unknown=False)
    (span,) = memory.get_finished_spans()
    assert span.attributes["gen_ai.provider.name"] == "gcp.gemini"
    assert "hello" in span.attributes["gen_ai.input.messages"]
    assert "be brief" in span.attributes["gen_ai.system_instructions"]
    assert "hi" in span.attributes["gen_ai.output.messages"]
    tracing.shutdown()


async def test_a_certification_run_traces_each_case_marked_as_certification(
    traced: tuple[OtelTracing, InMemorySpanExporter],
) -> None:
    tracing, memory = traced
    triage = load_catalog()["ticket-triage@1"]
    case = triage.case("double-charge-march")
    provider = ProviderConfig(name="p", protocol="openai", base_url="http://p/v1", model="gpt-4o")

    def answer(request: httpx.Request) -> httpx.Response:
        output = json.dumps(triage.simulate(case.input))
        choice = {"index": 0, "message": {"role": "assistant", "content": output}}
        body = {"id": "c1", "model": "gpt-4o", "choices": [{**choice, "finish_reason": "stop"}]}
        return httpx.Response(200, json=body)

    runner = Runner(Mode.LIVE, repeats=1, spans=tracing)
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        await runner.run_case(client, triage, case, provider)
    (span,) = memory.get_finished_spans()
    assert span.name == "onejob.certification"
    assert span.attributes["onejob.certification"] is True
    assert span.attributes["onejob.certification.run_id"] == runner.run_id
    assert span.attributes["onejob.provider"] == "p"
