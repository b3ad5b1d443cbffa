"""What Anthropic says about its capacity: ``anthropic-ratelimit-*`` headers and its errors.

Sources: Anthropic's rate-limit guide (``retry-after`` in seconds on a 429;
``anthropic-ratelimit-requests-limit``, ``-remaining`` and ``-reset`` with the reset as an
RFC 3339 time, and the same for ``tokens``, ``input-tokens`` and ``output-tokens``) and its
errors (429 ``rate_limit_error``, 529 ``overloaded_error``, 402 ``billing_error``); the
anthropic-python SDK's error types (``PaymentRequiredError`` for 402, and the
``error.details.error_code`` values of a 429 that is a spent budget, not a rate:
``enforced_spend_limit_reached``, ``contract_spend_limit_reached``); and the messages the
API answers with a 400 ``invalid_request_error`` when the credit balance is spent ("Your
credit balance is too low to access the Anthropic API. ...") or a spend limit set in the
console is reached ("You have reached your specified API usage limits. ...").
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import httpx

from providers.base import RateLimits
from providers.capacity import (
    OVERLOADED,
    QUOTA,
    RATE_LIMITED,
    CapacityAnswer,
    error_object,
    generic_capacity,
    header_int,
    headers_with_prefix,
)

HEADER_PREFIX = b"anthropic-ratelimit-"
#: The token buckets, each with ``-limit``, ``-remaining``, ``-reset``: ``tokens`` is the
#: most restrictive in effect, the other two the input and output buckets themselves.
TOKEN_BUCKETS = ("tokens", "input-tokens", "output-tokens")
#: ``error.details.error_code`` of a 429 that is a spent budget, which no wait within a
#: job's life brings back (the monthly tier limit, a contract's limit).
SPENT_CODES = frozenset({"enforced_spend_limit_reached", "contract_spend_limit_reached"})
#: How a 400 ``invalid_request_error`` begins when the money, not the request, is wrong.
SPENT_MESSAGES = (
    "Your credit balance is too low",
    "You have reached your specified API usage limits",
    "You have reached your specified workspace API usage limits",
)


def rfc3339_in(text: str | None, now: float | None = None) -> float | None:
    """Return the seconds from ``now`` to an RFC 3339 time (0 when past; None if unreadable)."""
    if not text:
        return None
    try:
        when = datetime.datetime.fromisoformat(text.strip())
        if when.tzinfo is None:  # RFC 3339 always has an offset; take a bare one as UTC
            when = when.replace(tzinfo=datetime.UTC)
        left = when.timestamp() - (time.time() if now is None else now)
    except (ValueError, TypeError, OverflowError):
        return None
    return max(0.0, left)


def rfc3339_text(unix: float) -> str:
    """Write a Unix time as RFC 3339 in UTC, to the second, as the API does (rounded up)."""
    whole = datetime.datetime.fromtimestamp(-(-unix // 1), datetime.UTC)
    return whole.strftime("%Y-%m-%dT%H:%M:%SZ")


def limits_of(headers: httpx.Headers, now: float | None = None) -> RateLimits | None:
    """Read the ``anthropic-ratelimit-*`` headers (None when the answer has none).

    Of the token buckets, the tightest (fewest tokens remaining) is the one reported.
    """
    said = headers_with_prefix(headers, HEADER_PREFIX)
    if not said:
        return None
    tokens: tuple[int | None, int | None, float | None] = (None, None, None)
    for bucket in TOKEN_BUCKETS:
        remaining = header_int(said.get(f"{bucket}-remaining"))
        candidate = (
            header_int(said.get(f"{bucket}-limit")),
            remaining,
            rfc3339_in(said.get(f"{bucket}-reset"), now),
        )
        if candidate == (None, None, None):
            continue
        if tokens == (None, None, None) or (
            remaining is not None and (tokens[1] is None or remaining < tokens[1])
        ):
            tokens = candidate
    limits = RateLimits(
        requests_limit=header_int(said.get("requests-limit")),
        requests_remaining=header_int(said.get("requests-remaining")),
        requests_reset_s=rfc3339_in(said.get("requests-reset"), now),
        tokens_limit=tokens[0],
        tokens_remaining=tokens[1],
        tokens_reset_s=tokens[2],
    )
    return limits if limits.said() else None


def capacity_of(status: int, body: Any) -> CapacityAnswer | None:
    """Read a Messages error: by its ``error.type`` first, then its status."""
    error = error_object(body)
    kind = error.get("type")
    details = error.get("details")
    code = details.get("error_code") if isinstance(details, dict) else None
    message = error.get("message")
    if status == 402 or kind == "billing_error" or (isinstance(code, str) and code in SPENT_CODES):
        return QUOTA
    if kind == "invalid_request_error" and isinstance(message, str):
        if message.startswith(SPENT_MESSAGES):
            return QUOTA
    if kind == "overloaded_error":
        return OVERLOADED
    if kind == "rate_limit_error":
        return RATE_LIMITED
    return generic_capacity(status)
