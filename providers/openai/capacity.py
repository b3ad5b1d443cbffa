"""What OpenAI says about its capacity: the ``x-ratelimit-*`` headers and its "not now" errors.

Sources: OpenAI's rate-limit guide (headers ``x-ratelimit-limit-requests``,
``-remaining-requests``, ``-reset-requests`` and the ``-tokens`` ones, the resets as Go
durations: ``1s``, ``6m0s``, ``20ms``) and error codes (429 ``rate_limit_exceeded`` of type
``requests`` or ``tokens``; 429 ``insufficient_quota``, "You exceeded your current quota,
please check your plan and billing details."; 503 "The engine is currently overloaded");
``retry-after-ms`` and ``retry-after`` are read as the openai-python SDK reads them
(``providers.capacity.retry_after_seconds``). The simulator's OpenAI wire writes the same
headers with ``go_duration_text``.
"""

from __future__ import annotations

import math
import re
from typing import Any

import httpx

from providers.base import RateLimits
from providers.capacity import (
    QUOTA,
    CapacityAnswer,
    error_object,
    generic_capacity,
    header_int,
    headers_with_prefix,
    seconds,
)

HEADER_PREFIX = b"x-ratelimit-"
#: ``error.code`` / ``error.type`` values of a spent quota or billing problem: no wait helps.
QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached", "billing_not_active"})

_GO_PART = re.compile(r"(\d+\.?\d*|\.\d+)(h|ms|us|µs|μs|ns|m|s)")
_GO_UNIT = {
    "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ns": 1e-9,
}  # fmt: skip


def go_duration(text: str | None) -> float | None:
    """Read a Go duration (``1s``, ``6m0s``, ``20ms``, ``1h2m3.5s``, ``0.3s``) as seconds.

    The usual one unit (``0.3s``, ``20ms``) is read without the regular expression, which
    only the compound ones (``6m0s``) need. Anything else (a sign, no unit, words) is None.
    """
    if not text:
        return None
    text = text.strip()
    try:
        if text.endswith("ms"):
            return seconds(float(text[:-2]) / 1000)
        if text.endswith("s") and text[:-1].replace(".", "", 1).isdigit():
            return seconds(float(text[:-1]))
    except ValueError:
        pass
    total, at = 0.0, 0
    while at < len(text):
        part = _GO_PART.match(text, at)
        if part is None:
            return None
        total += float(part.group(1)) * _GO_UNIT[part.group(2)]
        at = part.end()
    return seconds(total)


def go_duration_text(value: float) -> str:
    """Write ``value`` seconds as Go prints a duration (``100ms``, ``1.5s``, ``6m0s``).

    Under a second in whole milliseconds, rounded up (a client that waits that long finds
    the bucket refilled); above, hours, minutes and seconds to the millisecond.
    """
    if value <= 0:
        return "0s"
    if value < 1:
        return f"{math.ceil(value * 1000 - 1e-9)}ms"
    millis = math.ceil(value * 1000 - 1e-9)
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs = f"{millis / 1000:.3f}".rstrip("0").rstrip(".")
    text = f"{secs}s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    if hours:
        text = f"{hours}h{text}"
    return text


def limits_of(headers: httpx.Headers) -> RateLimits | None:
    """Read the ``x-ratelimit-*`` headers (None when the answer has none)."""
    said = headers_with_prefix(headers, HEADER_PREFIX)
    if not said:
        return None
    limits = RateLimits(
        requests_limit=header_int(said.get("limit-requests")),
        requests_remaining=header_int(said.get("remaining-requests")),
        requests_reset_s=go_duration(said.get("reset-requests")),
        tokens_limit=header_int(said.get("limit-tokens")),
        tokens_remaining=header_int(said.get("remaining-tokens")),
        tokens_reset_s=go_duration(said.get("reset-tokens")),
    )
    return limits if limits.said() else None


def capacity_of(status: int, body: Any) -> CapacityAnswer | None:
    """Read a Chat Completions error: a spent quota by its code, else by status.

    OpenAI answers a spent quota with the rate limit's status, 429, so the code decides:
    ``insufficient_quota`` is billing, and no wait makes it pass.
    """
    error = error_object(body)
    if any(isinstance(v, str) and v in QUOTA_CODES for v in (error.get("code"), error.get("type"))):
        return QUOTA
    return generic_capacity(status)
