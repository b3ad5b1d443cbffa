"""What Gemini says about its capacity: not in headers, in the error's ``details``.

Sources: Google's API error model (https://cloud.google.com/apis/design/errors: 429
``RESOURCE_EXHAUSTED``, 503 ``UNAVAILABLE``, ``details`` of type
``type.googleapis.com/google.rpc.RetryInfo`` with ``retryDelay``, a protobuf Duration in
JSON such as ``"30s"`` or ``"1.500s"``, and ``google.rpc.QuotaFailure`` whose
``violations`` name the quota, e.g. ``quotaId: GenerateRequestsPerMinutePerProjectPerModel``)
and the Gemini API's rate-limit guide. A per-minute quota comes back within the minute; a
per-day one (``...PerDay...``) not before the day ends, and a quota of 0 never: those are
hard quotas. Gemini sends no rate-limit headers, so ``limits_of`` is the base's (None).
"""

from __future__ import annotations

import math
from typing import Any

from providers.capacity import (
    OVERLOAD_STATUSES,
    QUOTA,
    Capacity,
    CapacityAnswer,
    error_object,
    seconds,
)

RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
QUOTA_FAILURE = "type.googleapis.com/google.rpc.QuotaFailure"


def duration_seconds(text: Any) -> float | None:
    """Read a protobuf Duration in JSON (``"30s"``, ``"1.500s"``) as seconds, else None."""
    if not isinstance(text, str) or not text.endswith("s"):
        return None
    try:
        return seconds(float(text[:-1]))
    except ValueError:
        return None


def duration_text(value: float) -> str:
    """Write seconds as a protobuf Duration in JSON: ``"30s"``, or 3 fractional digits
    (rounded up to the millisecond: a client that waits that long is admitted)."""
    millis = max(0, math.ceil(value * 1000 - 1e-6))
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis / 1000:.3f}s"


def _details(error: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    details = error.get("details")
    if not isinstance(details, list):
        return []
    return [d for d in details if isinstance(d, dict) and d.get("@type") == kind]


def _hard(violation: Any) -> bool:
    """Say whether a quota violation is one no wait within minutes lifts."""
    if not isinstance(violation, dict):
        return False
    quota_id, metric = violation.get("quotaId"), violation.get("quotaMetric")
    per_day = (isinstance(quota_id, str) and "PerDay" in quota_id) or (
        isinstance(metric, str) and "per_day" in metric
    )
    return per_day or violation.get("quotaValue") == "0"


def capacity_of(status: int, body: Any) -> CapacityAnswer | None:
    """Read a generateContent error: its ``status`` and ``details`` first, then the code."""
    error = error_object(body)
    delay = next(
        (
            found
            for info in _details(error, RETRY_INFO)
            if (found := duration_seconds(info.get("retryDelay"))) is not None
        ),
        None,
    )
    for failure in _details(error, QUOTA_FAILURE):
        violations = failure.get("violations")
        if isinstance(violations, list) and any(_hard(v) for v in violations):
            return QUOTA
    state = error.get("status")
    if state == "RESOURCE_EXHAUSTED" or status == 429:
        return CapacityAnswer(Capacity.RATE_LIMITED, delay)
    if state == "UNAVAILABLE" or status in OVERLOAD_STATUSES:
        return CapacityAnswer(Capacity.OVERLOADED, delay)
    return None
