"""The tracing seam: what the gateway tells a tracer, and the tracer that records nothing.

``Tracing`` is the seam and its null object at once: every method does nothing (or hands
back what it was given), so with ``[telemetry] enabled = false`` (the default) nothing of
OpenTelemetry is imported and a job pays a few no-op calls (docs/benchmarks.md measures
it). ``gateway.bootstrap.build_tracing`` (the composition root) returns it, or, when
enabled, ``gateway.tracing_otel.OtelTracing``, which records spans with the OpenTelemetry
SDK and exports them over OTLP. docs/telemetry.md says what each span carries.

Spans, and who emits them (a job outlives the processes that work on it):

- the HTTP request's (SERVER), by the process that answers it, joining the caller's
  ``traceparent``; a new job keeps that span's context (``job_context``);
- the job's, by the process that settles it (``job_settled``), from ``created_at`` to
  the decision, with a span id derived from the job id, parented on the kept context;
- each attempt's (``attempt``), by the process that runs it, a child of the job's span
  (by its derived id: no link is needed, whichever process runs it);
- each provider call's (CLIENT, ``provider_call``), a child of its attempt's, named and
  attributed by the GenAI semantic conventions; its ``traceparent`` goes to the provider.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from pydantic import BaseModel, ConfigDict

from gateway.domain.records import AttemptRecord, JobRecord
from gateway.domain.trace_context import trace_context
from providers.base import ProviderRequest, ProviderResult

#: The GenAI semantic conventions the provider-call spans follow (docs/telemetry.md).
GENAI_SEMCONV = "1.37.0"
#: What turns message capture on, as OpenTelemetry's GenAI instrumentations read it.
CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
#: Turns tracing on or off whatever the TOML says (``on``/``off``): for a benchmark's run.
ENABLED_ENV = "ONEJOB_TELEMETRY"
_TRUE = ("1", "true", "on", "yes")


class TelemetryConfig(BaseModel):
    """``[telemetry]``: OpenTelemetry tracing (off by default). Where spans go, and how
    many are kept, is the standard ``OTEL_*`` variables' (docs/telemetry.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    #: ``service.name`` when ``OTEL_SERVICE_NAME`` (or ``OTEL_RESOURCE_ATTRIBUTES``) sets none.
    service_name: str = "onejob"
    #: Record prompts and outputs on the provider-call spans (they may hold personal data).
    capture_content: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TelemetryConfig:
        """The defaults, with ``ONEJOB_TELEMETRY`` and the GenAI capture variable applied."""
        return cls().with_env(env)

    def with_env(self, env: Mapping[str, str] | None = None) -> TelemetryConfig:
        """This configuration with the environment's overrides applied."""
        env = os.environ if env is None else env
        changes: dict[str, bool] = {}
        if ENABLED_ENV in env:
            changes["enabled"] = env[ENABLED_ENV].strip().lower() in _TRUE
        if CAPTURE_ENV in env:
            changes["capture_content"] = env[CAPTURE_ENV].strip().lower() in _TRUE
        return self.model_copy(update=changes) if changes else self


ASGIApp = Callable[..., Any]
_NO_SPAN: AbstractContextManager[None] = nullcontext()


class CallSpan:
    """One provider call's span; this one records nothing."""

    __slots__ = ()

    def outgoing(
        self, request: ProviderRequest, traceparent: str | None, tracestate: str | None
    ) -> ProviderRequest:
        """The request as sent: carrying the job's kept context to the provider."""
        if traceparent is None:
            return request
        return dataclasses.replace(request, traceparent=traceparent, tracestate=tracestate)

    def ended(
        self, result: ProviderResult | None, error: Mapping[str, Any] | None, *, unknown: bool
    ) -> None:
        """Record how the call ended, and end the span."""


NO_CALL_SPAN = CallSpan()


class Tracing:
    """Record nothing: the seam's null object (tracing off)."""

    enabled = False

    def asgi(self, app: ASGIApp) -> ASGIApp:
        """Wrap the whole app in a SERVER span per request (here: the app as it is)."""
        return app

    def job_context(
        self, traceparents: Sequence[str], tracestates: Sequence[str]
    ) -> tuple[str | None, str | None]:
        """The context a new job keeps: the request's, if valid (here: the caller's)."""
        if not traceparents:
            return None, None
        return trace_context(traceparents, tracestates)

    def note(self, **attributes: Any) -> None:
        """Set attributes on the current span (the request's, or an attempt's)."""

    def attempt(self, job: JobRecord, attempt: AttemptRecord) -> AbstractContextManager[None]:
        """Run an attempt inside its span, a child of the job's."""
        return _NO_SPAN

    def provider_call(self, protocol: str, request: ProviderRequest, **attributes: Any) -> CallSpan:
        """Start a provider call's CLIENT span, a child of the current one (``CallSpan.ended``
        ends it); ``attributes`` are onejob's (``job.id``, ``attempt.number``)."""
        return NO_CALL_SPAN

    def job_settled(self, job: JobRecord, **attributes: Any) -> None:
        """Emit the job's span: ``job`` was just decided, failed or cancelled here."""

    def job_step(
        self, job: JobRecord, name: str, **attributes: Any
    ) -> AbstractContextManager[None]:
        """Run some work on a job (a reconcile lookup, a shadow check) in a child of its span."""
        return _NO_SPAN

    def run(self, name: str, **attributes: Any) -> AbstractContextManager[None]:
        """Run some work of no job (a certification run) in a span of its own."""
        return _NO_SPAN

    def shutdown(self) -> None:
        """Export what is left, and stop."""


NO_TRACING = Tracing()
