"""The W3C trace context a request carries to onejob, so the job joins the caller's trace.

An explicit ``traceparent`` (and ``tracestate``) is sent as given. Otherwise, when the
``opentelemetry`` API can be imported, the current context is injected by its configured
propagator (W3C Trace Context by default); when it cannot, nothing is added. onejob keeps
the context with the job, and its spans and the provider calls join that trace.
"""

from __future__ import annotations

from typing import Any

_propagate: Any = None  # opentelemetry.propagate, once found; False: not installed


def _propagator() -> Any:
    global _propagate
    if _propagate is None:
        try:
            from opentelemetry import propagate
        except ImportError:  # optional: the client needs httpx alone
            _propagate = False
        else:
            _propagate = propagate
    return _propagate


def trace_headers(traceparent: str | None = None, tracestate: str | None = None) -> dict[str, str]:
    """Return the headers that carry the caller's trace context (empty: none)."""
    if traceparent:
        headers = {"traceparent": traceparent}
        if tracestate:
            headers["tracestate"] = tracestate
        return headers
    propagate = _propagator()
    if not propagate:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier
