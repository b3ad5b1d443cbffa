"""The clients carry the caller's trace context: an explicit ``traceparent``, or the current
OpenTelemetry context when the API is installed; nothing when neither."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from onejob_client import AsyncClient, Client, Intention, RetryPolicy
from onejob_client import tracing as client_tracing
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

BASE = "http://onejob.test"
INTENTION = Intention.new("ticket-triage@1", {"ticket_id": "SUP-7"})
GIVEN = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
JOB = {
    "id": "job_1",
    "idempotency_key": "k",
    "contract": "ticket-triage@1",
    "provider": "p",
    "status": "queued",
    "version": 1,
    "completed_by": None,
    "result": None,
    "error": None,
    "attempts": [],
    "trace": {"traceparent": GIVEN, "trace_id": GIVEN[3:35], "tracestate": None},
}


class Gateway:
    """Answers a 503 first, then the job; keeps every request's headers."""

    def __init__(self) -> None:
        self.seen: list[httpx.Headers] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request.headers)
        if len(self.seen) == 1:
            return httpx.Response(503, json={"type": "about:blank", "status": 503})
        return httpx.Response(
            201, content=json.dumps(JOB), headers={"content-type": "application/json"}
        )


def sync_client(gateway: Gateway) -> Client:
    transport = httpx.MockTransport(gateway)
    policy = RetryPolicy(initial_backoff=0.0, max_backoff=0.0)
    return Client(
        BASE, "key", policy=policy, http=httpx.Client(transport=transport), sleep=lambda _: None
    )


def test_an_explicit_traceparent_goes_with_every_try_and_the_job_shows_its_trace() -> None:
    gateway = Gateway()
    with sync_client(gateway) as client:
        created = client.create_job(INTENTION, traceparent=GIVEN, tracestate="v=1")
    assert [h.get("traceparent") for h in gateway.seen] == [GIVEN, GIVEN]
    assert [h.get("tracestate") for h in gateway.seen] == ["v=1", "v=1"]
    assert created.job.trace is not None and created.job.trace["trace_id"] == GIVEN[3:35]


@pytest.fixture
def tracer() -> Iterator[trace.Tracer]:
    yield TracerProvider().get_tracer("the caller")


def test_the_current_opentelemetry_context_is_sent(tracer: trace.Tracer) -> None:
    gateway = Gateway()
    with tracer.start_as_current_span("caller") as span, sync_client(gateway) as client:
        client.create_job(INTENTION)
        context = span.get_span_context()
    expected = f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    assert [h.get("traceparent") for h in gateway.seen] == [expected, expected]


async def test_the_async_client_sends_the_current_context_too(tracer: trace.Tracer) -> None:
    gateway = Gateway()
    transport = httpx.MockTransport(gateway)

    async def no_sleep(_: float) -> None:
        return None

    policy = RetryPolicy(initial_backoff=0.0, max_backoff=0.0)
    http = httpx.AsyncClient(transport=transport)
    async with AsyncClient(BASE, "key", policy=policy, http=http, sleep=no_sleep) as client:
        with tracer.start_as_current_span("caller") as span:
            await client.create_job(INTENTION)
            trace_id = f"{span.get_span_context().trace_id:032x}"
        await http.aclose()
    assert all(h["traceparent"][3:35] == trace_id for h in gateway.seen)


def test_without_opentelemetry_and_no_traceparent_nothing_is_added(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client_tracing, "_propagate", False)  # as if it were not installed
    gateway = Gateway()
    with sync_client(gateway) as client:
        client.create_job(INTENTION)
    assert all("traceparent" not in h for h in gateway.seen)
    assert client_tracing.trace_headers(GIVEN) == {"traceparent": GIVEN}
