"""Shadow checks trace too, marked as such: a trace of their own (they re-run a job that
already succeeded, outside the caller's intention), with the fallback's CLIENT span. The
reconciler's lookup is in the job's trace, and the job it decides gets its span."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from contracts.registry import CertificationRegistry
from gateway.bootstrap import build_reconciler
from gateway.dispatch.routing import Routes
from gateway.domain.fingerprint import fingerprint
from gateway.domain.records import NewJob
from gateway.domain.trace_context import job_span_id
from gateway.metrics import Metrics
from gateway.service.base import NoCertifications
from gateway.settings import Settings
from gateway.shadow import ShadowChecker
from gateway.store import SqlJobStore
from gateway.tracing import TelemetryConfig
from gateway.tracing_otel import OtelTracing
from providers.base import ProviderResult, Usage
from providers.lookup import StoredAnswer
from tests.integration.dispatch.dispatch_harness import case_input, certify
from tests.integration.dispatch.test_shadow_checker import (
    CATALOG,
    TRIAGE,
    Fallback,
    settings,
    store,
    succeed,
)

__all__ = ["store"]  # the fixture, shared with the shadow checker's tests


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[OtelTracing, InMemorySpanExporter]]:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    tracing = OtelTracing(TelemetryConfig(enabled=True))
    memory = InMemorySpanExporter()
    tracing.provider.add_span_processor(SimpleSpanProcessor(memory))
    yield tracing, memory
    tracing.shutdown()


async def test_a_shadow_check_is_a_trace_of_its_own_marked_shadow(
    tmp_path: Path,
    database_url: str,
    store: SqlJobStore,
    traced: tuple[OtelTracing, InMemorySpanExporter],
) -> None:
    tracing, memory = traced
    s = settings(tmp_path, database_url)
    certify(Path(s.certifications_path), list(s.providers.values()))
    registry = CertificationRegistry(s.certifications_path)
    shadow = ShadowChecker(
        store=store,
        providers={"f": Fallback("f")},
        provider_configs=s.providers,
        catalog=CATALOG,
        routes=Routes(s, CATALOG, s.providers, registry),
        registry=registry,
        settings=s,
        metrics=Metrics().certification,
        tracing=tracing,
    )
    job_id = await succeed(store, 0)
    assert len(await shadow.run_once()) == 1
    spans = {span.name: span for span in memory.get_finished_spans()}
    check, call = spans["onejob.shadow_check"], spans["chat claude"]
    assert check.attributes["onejob.shadow"] is True
    assert check.attributes["onejob.job.id"] == job_id
    assert check.parent is None  # not in the job's trace
    assert call.kind is SpanKind.CLIENT and call.parent.span_id == check.context.span_id
    assert call.attributes["onejob.shadow"] is True
    assert call.attributes["gen_ai.provider.name"] == "anthropic"
    assert call.attributes["gen_ai.response.id"] == "req-1"


async def test_the_reconcilers_lookup_is_in_the_jobs_trace_and_its_decision_emits_the_job(
    store: SqlJobStore, traced: tuple[OtelTracing, InMemorySpanExporter]
) -> None:
    tracing, memory = traced
    data = case_input(0)
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    new = NewJob(
        "alice", "k1", fingerprint(TRIAGE, data, None), TRIAGE, "sim-openai", None, data,
        traceparent=f"00-{trace_id}-{parent}-01",
    )  # fmt: skip
    await store.create_or_get(new)
    claimed = await store.claim_next_attempt(
        "w1", lease_ttl=30.0, deadline_s={}, default_deadline_s=1.0
    )
    assert claimed is not None
    await store.mark_unknown(claimed.attempt.id, {"outcome": "unknown", "reason": "deadline"})
    attempt = await store.get_attempt(claimed.attempt.id)
    assert attempt is not None
    answer = CATALOG[TRIAGE].simulate(data)

    class Stored:
        name = "sim-openai"

        async def lookup(self, downstream_key: str, *, timeout: float) -> StoredAnswer:
            result = ProviderResult(answer, json.dumps(answer), "chatcmpl-1", Usage(), "stop", 0.0)
            return StoredAnswer("chatcmpl-1", 1_700_000_000.0, 1, result)

    config = Settings.model_validate(
        {
            "providers": {
                "sim-openai": {
                    "protocol": "openai", "base_url": "http://p/v1", "model": "m",
                    "reconcile": True,
                }
            },
            "reconciler": {"grace": 0.0},
        }
    )  # fmt: skip
    reconciler = build_reconciler(
        config,
        store=store,
        providers={"sim-openai": Stored()},
        catalog=CATALOG,
        routes=Routes(config, CATALOG, config.providers, NoCertifications()),
        metrics=Metrics(),
        tracing=tracing,
    )
    await reconciler.check(attempt)
    spans = {span.name: span for span in memory.get_finished_spans()}
    lookup, job_span = spans["onejob.reconcile"], spans["onejob.job"]
    assert f"{lookup.context.trace_id:032x}" == trace_id
    assert lookup.parent.span_id == job_span_id(attempt.job_id) == job_span.context.span_id
    assert lookup.attributes["onejob.reconcile.outcome"] == "succeeded"
    assert job_span.attributes["onejob.decided_by"] == "reconciler"
    assert f"{job_span.parent.span_id:016x}" == parent
