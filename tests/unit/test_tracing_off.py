"""Tracing off (the default) loads nothing of the OpenTelemetry SDK, no exporter and no
span processor, so nothing is exported; the null tracer's calls hand back what they were
given. (Litestar itself imports ``opentelemetry``'s API at startup when it is installed,
looking for its own plug-in: once per process, not per request.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gateway.bootstrap import build_tracing
from gateway.domain.records import JobRecord
from gateway.tracing import NO_CALL_SPAN, NO_TRACING, TelemetryConfig
from providers.base import ProviderRequest

ROOT = Path(__file__).resolve().parents[2]
GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

SERVE_A_JOB = """
import asyncio, sys
import httpx
from gateway.app import create_app, settings_for_tests

async def main():
    app = create_app(settings_for_tests(database_url="sqlite+aiosqlite:///:memory:"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        await c.post("/v1/jobs", json={}, headers={"traceparent": "TRACEPARENT"})
        await c.get("/healthz")

asyncio.run(main())
# Litestar imports the API (not the SDK) when it is installed, looking for its own plug-in.
ours = ("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.proto")
ours += ("gateway.tracing_otel",)
print(sorted(m for m in sys.modules if m.startswith(ours)))
""".replace("TRACEPARENT", GOOD)


def test_tracing_is_off_by_default_and_loads_no_sdk_and_no_exporter() -> None:
    assert TelemetryConfig.from_env({}).enabled is False
    assert build_tracing(TelemetryConfig()) is NO_TRACING
    ran = subprocess.run(
        [sys.executable, "-c", SERVE_A_JOB],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={"PATH": "/usr/bin:/bin", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
    )
    assert ran.stdout.strip().splitlines()[-1] == "[]", ran.stdout + ran.stderr


def test_the_environment_turns_tracing_and_content_capture_on() -> None:
    env = {"ONEJOB_TELEMETRY": "on", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
    config = TelemetryConfig.from_env(env)
    assert config.enabled and config.capture_content
    assert TelemetryConfig(enabled=True).with_env({"ONEJOB_TELEMETRY": "off"}).enabled is False


def test_off_the_provider_still_gets_the_callers_context_and_the_app_is_not_wrapped() -> None:
    request = ProviderRequest("s", "u", {}, "n", "m")
    assert NO_CALL_SPAN.outgoing(request, None, None) is request
    sent = NO_CALL_SPAN.outgoing(request, GOOD, "a=1")
    assert (sent.traceparent, sent.tracestate) == (GOOD, "a=1")

    def app() -> None: ...

    assert NO_TRACING.asgi(app) is app
    assert NO_TRACING.job_context([GOOD], []) == (GOOD, None)
    assert NO_TRACING.job_context([], []) == (None, None)
    assert JobRecord.__dataclass_fields__["traceparent"].default is None
