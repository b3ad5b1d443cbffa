"""``Tracing`` on the OpenTelemetry SDK: spans exported over OTLP (the ``otel`` extra).

Imported by ``gateway.bootstrap.build_tracing`` only when ``[telemetry] enabled``. The SDK
reads the standard variables itself: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (and
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``..._HEADERS``, ``..._TIMEOUT``),
``OTEL_EXPORTER_OTLP_PROTOCOL`` (``http/protobuf``, the default, or ``grpc`` when
``opentelemetry-exporter-otlp-proto-grpc`` is installed), ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER`` and its argument, the batch
processor's ``OTEL_BSP_*``; ``OTEL_TRACES_EXPORTER`` may be ``otlp``, ``console`` or
``none``. The provider is this gateway's own (not the global one), so an application that
embeds onejob keeps its own.

A job's span has an id derived from the job's id (``gateway.domain.trace_context``): the
SDK gives a span the ids its ``IdGenerator`` makes, and ``_DerivedIds`` makes the one it is
told to while the job's span starts (a context variable), random ones otherwise.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime as dt
import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.domain.clock import aware
from gateway.domain.records import AttemptRecord, JobRecord
from gateway.domain.states import AttemptReason, JobStatus
from gateway.domain.trace_context import (
    SAMPLED,
    format_traceparent,
    job_span_id,
    job_trace_id,
    parse_traceparent,
)
from gateway.logging import JOB_ID_SCOPE_KEY
from gateway.tracing import (
    GENAI_SEMCONV,
    ASGIApp,
    CallSpan,
    TelemetryConfig,
    Tracing,
)
from providers.base import ProviderRequest, ProviderResult
from providers.registry import PLUGINS

log = logging.getLogger("onejob.tracing")
SCOPE = "onejob"  # the instrumentation scope's name
SCHEMA_URL = f"https://opentelemetry.io/schemas/{GENAI_SEMCONV}"
#: The ids the next span gets (trace id or None, span id), while a job's span starts.
_NEXT_IDS: contextvars.ContextVar[tuple[int | None, int] | None] = contextvars.ContextVar(
    "onejob_next_span_ids", default=None
)
_PROPAGATOR = TraceContextTextMapPropagator()


class _DerivedIds(RandomIdGenerator):
    """Random ids, except the ones a job's span is told to have."""

    def generate_span_id(self) -> int:
        told = _NEXT_IDS.get()
        return told[1] if told is not None else super().generate_span_id()

    def generate_trace_id(self) -> int:
        told = _NEXT_IDS.get()
        if told is not None and told[0] is not None:
            return told[0]
        return super().generate_trace_id()


def _exporter() -> SpanExporter | None:
    """The exporter ``OTEL_TRACES_EXPORTER`` and ``OTEL_EXPORTER_OTLP_PROTOCOL`` name."""
    kind = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    if kind == "none":
        return None
    if kind == "console":
        return ConsoleSpanExporter()
    protocol = os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
    ).strip()
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )
        except ImportError as exc:
            raise RuntimeError(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc "
                "installed; or use http/protobuf (the default)"
            ) from exc
        return GrpcExporter()  # type: ignore[no-any-return]
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def _resource(config: TelemetryConfig) -> Resource:
    """The SDK's resource (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``), named
    ``[telemetry] service_name`` when they name no service."""
    resource = Resource.create()
    named = str(resource.attributes.get(SERVICE_NAME, ""))
    if not named or named.startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: config.service_name}))
    return resource


def _ns(moment: dt.datetime) -> int:
    return int(aware(moment).timestamp() * 1e9)


def _job_parent(job: JobRecord) -> otel_context.Context:
    """The context a job's own span starts in: the one it was created in (none: a root)."""
    parent = parse_traceparent(job.traceparent)
    if parent is None:
        return otel_context.Context()
    kept = SpanContext(parent.trace_id, parent.span_id, True, TraceFlags(parent.flags))
    return trace.set_span_in_context(NonRecordingSpan(kept), otel_context.Context())


def _in_job(job: JobRecord) -> otel_context.Context:
    """The context of the job's span (by its derived id), for its children."""
    parent = parse_traceparent(job.traceparent)
    trace_id = parent.trace_id if parent is not None else job_trace_id(job.id)
    flags = parent.flags if parent is not None else SAMPLED
    span = SpanContext(trace_id, job_span_id(job.id), True, TraceFlags(flags))
    return trace.set_span_in_context(NonRecordingSpan(span), otel_context.Context())


class _OtelCallSpan(CallSpan):
    """A provider call's CLIENT span."""

    __slots__ = ("_capture", "_request", "_span")

    def __init__(self, span: trace.Span, request: ProviderRequest, capture: bool) -> None:
        self._span, self._request, self._capture = span, request, capture

    def outgoing(
        self, request: ProviderRequest, traceparent: str | None, tracestate: str | None
    ) -> ProviderRequest:
        """The request carrying this span's context (and the job's tracestate)."""
        own = self._span.get_span_context()
        if not own.is_valid:
            return super().outgoing(request, traceparent, tracestate)
        header = format_traceparent(own.trace_id, own.span_id, int(own.trace_flags))
        return dataclasses.replace(request, traceparent=header, tracestate=tracestate)

    def ended(
        self, result: ProviderResult | None, error: Mapping[str, Any] | None, *, unknown: bool
    ) -> None:
        span = self._span
        if result is not None:
            if result.model is not None:
                span.set_attribute("gen_ai.response.model", result.model)
            if result.request_id is not None:
                span.set_attribute("gen_ai.response.id", result.request_id)
            if result.finish_reason is not None:
                span.set_attribute("gen_ai.response.finish_reasons", [result.finish_reason])
            if result.usage.input_tokens is not None:
                span.set_attribute("gen_ai.usage.input_tokens", result.usage.input_tokens)
            if result.usage.output_tokens is not None:
                span.set_attribute("gen_ai.usage.output_tokens", result.usage.output_tokens)
            if self._capture:
                message = {
                    "role": "assistant",
                    "parts": [{"type": "text", "content": result.raw_text}],
                }
                span.set_attribute("gen_ai.output.messages", json.dumps([message]))
        elif error is not None:
            reason = str(error.get("reason") or "error")
            span.set_attribute("error.type", reason)
            span.set_attribute("onejob.unknown", unknown)
            span.set_status(Status(StatusCode.ERROR, str(error.get("message") or reason)[:200]))
        span.end()


class OtelTracing(Tracing):
    """Record spans with the OpenTelemetry SDK; export them over OTLP."""

    enabled = True

    def __init__(self, config: TelemetryConfig) -> None:
        self.config = config
        self.provider = TracerProvider(resource=_resource(config), id_generator=_DerivedIds())
        exporter = _exporter()
        if exporter is not None:
            self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer(SCOPE, schema_url=SCHEMA_URL)

    # -- the HTTP request --------------------------------------------------------------

    def asgi(self, app: ASGIApp) -> ASGIApp:
        tracer = self.tracer

        async def traced(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            carrier: dict[str, str] = {}
            for name, value in scope["headers"]:
                if name in (b"traceparent", b"tracestate"):
                    key = name.decode()
                    text = value.decode("latin-1")
                    carrier[key] = f"{carrier[key]},{text}" if key in carrier else text
            method = scope["method"]
            span = tracer.start_span(
                method,
                context=_PROPAGATOR.extract(carrier),
                kind=SpanKind.SERVER,
                attributes={
                    "http.request.method": method,
                    "url.path": scope["path"],
                    "url.scheme": scope.get("scheme", "http"),
                },
            )
            status: list[int] = []

            async def sending(message: Any) -> None:
                if message["type"] == "http.response.start":
                    status.append(message["status"])
                await send(message)

            token = otel_context.attach(trace.set_span_in_context(span))
            try:
                await app(scope, receive, sending)
            except BaseException as exc:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                raise
            finally:
                otel_context.detach(token)
                route = scope.get("path_template")
                if route:
                    span.update_name(f"{method} {route}")
                    span.set_attribute("http.route", route)
                if status:
                    span.set_attribute("http.response.status_code", status[0])
                    if status[0] >= 500:
                        span.set_status(Status(StatusCode.ERROR))
                job_id = (scope.get("state") or {}).get(JOB_ID_SCOPE_KEY)
                if job_id:
                    span.set_attribute("onejob.job.id", job_id)
                span.end()

        return traced

    def job_context(
        self, traceparents: Sequence[str], tracestates: Sequence[str]
    ) -> tuple[str | None, str | None]:
        """The server span's own context (the job's spans join it), with the caller's
        tracestate."""
        own = trace.get_current_span().get_span_context()
        _, state = super().job_context(traceparents, tracestates)
        if not own.is_valid:
            return super().job_context(traceparents, tracestates)
        return format_traceparent(own.trace_id, own.span_id, int(own.trace_flags)), state

    def note(self, **attributes: Any) -> None:
        span = trace.get_current_span()
        for key, value in attributes.items():
            if value is not None:
                span.set_attribute(f"onejob.{key}", value)

    # -- a job's attempts and calls ----------------------------------------------------

    @contextlib.contextmanager
    def attempt(self, job: JobRecord, attempt: AttemptRecord) -> Iterator[None]:
        span = self.tracer.start_span(
            "onejob.attempt",
            context=_in_job(job),
            attributes={
                "onejob.job.id": job.id,
                "onejob.contract": job.contract,
                "onejob.attempt.id": attempt.id,
                "onejob.attempt.number": attempt.number,
                "onejob.attempt.reason": attempt.reason.value,
                "onejob.attempt.provider": attempt.provider,
                "onejob.failover": attempt.reason is AttemptReason.FAILOVER,
            },
        )
        with trace.use_span(span, end_on_exit=True, record_exception=True):
            yield

    def provider_call(self, protocol: str, request: ProviderRequest, **attributes: Any) -> CallSpan:
        plugin = PLUGINS.get(protocol)
        provider = (plugin.genai_provider if plugin is not None else "") or protocol
        attributes = {
            **{f"onejob.{k}": v for k, v in attributes.items() if v is not None},
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": request.model,
            "gen_ai.request.temperature": request.temperature,
            "gen_ai.request.max_tokens": request.max_output_tokens,
            "gen_ai.output.type": "json",
        }
        capture = self.config.capture_content
        if capture:
            attributes["gen_ai.system_instructions"] = json.dumps(
                [{"type": "text", "content": request.system}]
            )
            user = {"role": "user", "parts": [{"type": "text", "content": request.user}]}
            attributes["gen_ai.input.messages"] = json.dumps([user])
        span = self.tracer.start_span(
            f"chat {request.model}", kind=SpanKind.CLIENT, attributes=attributes
        )
        return _OtelCallSpan(span, request, capture)

    def job_settled(self, job: JobRecord, **attributes: Any) -> None:
        """Emit the job's span: from its creation to now, with the derived span id."""
        token = _NEXT_IDS.set(
            (None if job.traceparent else job_trace_id(job.id), job_span_id(job.id))
        )
        try:
            span = self.tracer.start_span(
                "onejob.job",
                context=_job_parent(job),
                start_time=_ns(job.created_at),
                attributes={
                    "onejob.job.id": job.id,
                    "onejob.contract": job.contract,
                    "onejob.job.status": job.status.value,
                    "onejob.job.attempts": len(job.attempts),
                    "onejob.completed_by": job.completed_by or "",
                    **{f"onejob.{k}": v for k, v in attributes.items() if v is not None},
                },
            )
        finally:
            _NEXT_IDS.reset(token)
        if job.status is JobStatus.FAILED:
            span.set_status(Status(StatusCode.ERROR, "failed"))
        span.end(end_time=_ns(job.updated_at))

    @contextlib.contextmanager
    def job_step(self, job: JobRecord, name: str, **attributes: Any) -> Iterator[None]:
        span = self.tracer.start_span(
            name,
            context=_in_job(job),
            attributes={
                "onejob.job.id": job.id,
                **{f"onejob.{k}": v for k, v in attributes.items() if v is not None},
            },
        )
        with trace.use_span(span, end_on_exit=True, record_exception=True):
            yield

    @contextlib.contextmanager
    def run(self, name: str, **attributes: Any) -> Iterator[None]:
        span = self.tracer.start_span(
            name,
            context=otel_context.Context(),
            attributes={f"onejob.{k}": v for k, v in attributes.items() if v is not None},
        )
        with trace.use_span(span, end_on_exit=True, record_exception=True):
            yield

    def shutdown(self) -> None:
        try:
            self.provider.shutdown()
        except Exception:  # an exporter that cannot flush must not fail the shutdown
            log.exception("tracing did not shut down cleanly")
