"""A provider's "not now", and what it says about its rate limits: the parts every protocol shares.

Each protocol's plug-in knows its own shapes (``providers/openai/capacity.py`` ...): which
error answers are a rate limit, an overload or a hard quota (``capacity_of``, returning a
``CapacityAnswer``), and how its headers state its limits (``limits_of``, returning
``providers.base.RateLimits``). The adapters' base (``providers.json_http_adapter``)
calls both and raises ``RateLimited``, ``Overloaded`` or ``QuotaExhausted``. What they
share is here: the verdict, ``Retry-After`` in all its spellings, and reading headers
cheaply (a successful answer's headers are read on every call, so nothing here uses a
regular expression or raises on a value it does not understand).
"""

from __future__ import annotations

import dataclasses
import email.utils
import enum
import math
import time
from typing import Any

import httpx

#: Statuses that mean "overloaded" on every API: 503 Service Unavailable, and 529, which
#: Anthropic sends (``overloaded_error``) and proxies in front of it pass on.
OVERLOAD_STATUSES = frozenset({503, 529})


class Capacity(enum.StrEnum):
    """Which kind of "not now" an error answer is."""

    RATE_LIMITED = "rate_limited"  #: this client asks too much: wait, then send it again
    OVERLOADED = "overloaded"  #: the provider is short of capacity for everyone: wait
    QUOTA = "quota"  #: a hard quota (billing, a daily quota) is spent: waiting will not help


@dataclasses.dataclass(frozen=True, slots=True)
class CapacityAnswer:
    """A protocol's reading of an error answer that is about capacity."""

    kind: Capacity
    #: Seconds the body asked to wait (Gemini's ``RetryInfo``); headers are read apart.
    retry_after: float | None = None


RATE_LIMITED = CapacityAnswer(Capacity.RATE_LIMITED)
OVERLOADED = CapacityAnswer(Capacity.OVERLOADED)
QUOTA = CapacityAnswer(Capacity.QUOTA)


def generic_capacity(status: int) -> CapacityAnswer | None:
    """Read a status alone: 429 is a rate limit, 503 and 529 an overload, others neither."""
    if status == 429:
        return RATE_LIMITED
    if status in OVERLOAD_STATUSES:
        return OVERLOADED
    return None


def error_object(body: Any) -> dict[str, Any]:
    """Return the ``error`` object of an error body (``{}`` when there is none)."""
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


def seconds(value: float) -> float | None:
    """Return ``value`` when it is a usable number of seconds (finite, not negative)."""
    return value if math.isfinite(value) and value >= 0 else None


def retry_after_seconds(headers: httpx.Headers, now: float | None = None) -> float | None:
    """Read ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date) as seconds.

    The milliseconds come first, as the official SDKs read them: OpenAI sends both, and
    ``retry-after`` rounded up to whole seconds. A date in the past is 0; a value that is
    none of these (negative, infinite, words) is not said (None), never an error.
    """
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            if (waited := seconds(float(ms) / 1000)) is not None:
                return waited
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return seconds(float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
        left = when.timestamp() - (time.time() if now is None else now)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return max(0.0, left) if math.isfinite(left) else None


def headers_with_prefix(headers: httpx.Headers, prefix: bytes) -> dict[str, str]:
    """Return the headers whose name starts with ``prefix`` (lower case), in one pass.

    Keyed by the rest of the name, lower case (``limit-requests`` for
    ``x-ratelimit-limit-requests``). One pass over the raw list costs about what one
    ``headers.get`` does, where a ``get`` per header would scan the list six times.
    """
    size = len(prefix)
    found: dict[str, str] = {}
    for name, value in headers.raw:
        if name[:size].lower() == prefix:
            found[name[size:].lower().decode("latin-1")] = value.decode("latin-1")
    return found


def header_int(value: str | None) -> int | None:
    """Return a header's whole number (not negative), else None."""
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        return None
    return number if number >= 0 else None
