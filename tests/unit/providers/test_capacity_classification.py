"""A provider's "not now", as each API says it: rate limits, overloads, hard quotas.

Bodies and headers are the APIs' own (OpenAI's error codes and rate-limit guide, Anthropic's
errors and rate-limit headers with the anthropic SDK's error details, Gemini 429 bodies as
the API returns them). Each answer must land on its one class: a rate limit or an overload
is ``NoCapacity`` (send the same request again later), a spent quota is ``QuotaExhausted``
and never ``NoCapacity``, and an ordinary refusal stays ``Rejected``.
"""

from __future__ import annotations

import datetime
import json
import ssl
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import respx

from providers.base import (
    AmbiguousStatus,
    DefiniteFailure,
    NoCapacity,
    Overloaded,
    ProviderError,
    ProviderRequest,
    QuotaExhausted,
    RateLimited,
    RateLimits,
    Rejected,
    Unavailable,
)
from providers.config import ProviderConfig
from providers.factory import build_provider

TLS = ssl.create_default_context()

OPENAI_LIKE = ("openai", "openai-compatible")

# -- the APIs' bodies ----------------------------------------------------------------------

OPENAI_RATE_LIMIT = {
    "error": {
        "message": "Rate limit reached for gpt-4o in organization org-abc on requests per min "
        "(RPM): Limit 60, Used 60, Requested 1. Please try again in 1s. Visit "
        "https://platform.openai.com/account/rate-limits to learn more.",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}
OPENAI_QUOTA = {
    "error": {
        "message": "You exceeded your current quota, please check your plan and billing details. "
        "For more information on this error, read the docs: "
        "https://platform.openai.com/docs/guides/error-codes/api-errors.",
        "type": "insufficient_quota",
        "param": None,
        "code": "insufficient_quota",
    }
}
OPENAI_OVERLOADED = {
    "error": {
        "message": "The engine is currently overloaded, please try again later.",
        "type": "server_error",
        "param": None,
        "code": None,
    }
}
#: The example of OpenAI's rate-limit guide.
OPENAI_HEADERS = {
    "x-ratelimit-limit-requests": "60",
    "x-ratelimit-limit-tokens": "150000",
    "x-ratelimit-remaining-requests": "59",
    "x-ratelimit-remaining-tokens": "149984",
    "x-ratelimit-reset-requests": "1s",
    "x-ratelimit-reset-tokens": "6m0s",
}


def anthropic_error(kind: str, message: str, **error: Any) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": kind, "message": message, **error},
        "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
    }


def rfc3339(seconds_from_now: float) -> str:
    when = datetime.datetime.fromtimestamp(time.time() + seconds_from_now, datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def anthropic_headers(requests_remaining: int = 49, reset_in: float = 30.0) -> dict[str, str]:
    return {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": str(requests_remaining),
        "anthropic-ratelimit-requests-reset": rfc3339(reset_in),
        "anthropic-ratelimit-tokens-limit": "48000",
        "anthropic-ratelimit-tokens-remaining": "47000",
        "anthropic-ratelimit-tokens-reset": rfc3339(10),
        "anthropic-ratelimit-input-tokens-limit": "40000",
        "anthropic-ratelimit-input-tokens-remaining": "39000",
        "anthropic-ratelimit-input-tokens-reset": rfc3339(10),
        "anthropic-ratelimit-output-tokens-limit": "8000",
        "anthropic-ratelimit-output-tokens-remaining": "1200",
        "anthropic-ratelimit-output-tokens-reset": rfc3339(50),
    }


def gemini_429(*details: dict[str, Any]) -> dict[str, Any]:
    return {
        "error": {
            "code": 429,
            "message": "You exceeded your current quota, please check your plan and billing "
            "details. For more information on this error, head to: "
            "https://ai.google.dev/gemini-api/docs/rate-limits.",
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.Help",
                    "links": [
                        {
                            "description": "Learn more about Gemini API quotas",
                            "url": "https://ai.google.dev/gemini-api/docs/rate-limits",
                        }
                    ],
                },
                *details,
            ],
        }
    }


def quota_failure(quota_id: str, metric: str, value: str | None = "10") -> dict[str, Any]:
    violation: dict[str, Any] = {
        "quotaMetric": metric,
        "quotaId": quota_id,
        "quotaDimensions": {"location": "global", "model": "gemini-2.5-flash"},
    }
    if value is not None:
        violation["quotaValue"] = value
    return {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [violation]}


PER_MINUTE = quota_failure(
    "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
    "generativelanguage.googleapis.com/generate_content_free_tier_requests",
)
PER_DAY = quota_failure(
    "GenerateRequestsPerDayPerProjectPerModel",
    "generativelanguage.googleapis.com/generate_requests_per_model_per_day",
    value=None,
)


def retry_info(delay: str) -> dict[str, Any]:
    return {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}


GEMINI_UNAVAILABLE = {
    "error": {
        "code": 503,
        "message": "The model is overloaded. Please try again later.",
        "status": "UNAVAILABLE",
    }
}


async def answer(
    wire: Any,
    config: ProviderConfig,
    request: ProviderRequest,
    status: int,
    body: Any,
    headers: dict[str, str] | None = None,
) -> Any:
    """Call once against ``status``/``body``; return the result or the error raised."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = httpx.Response(status, headers=headers or {}, content=content)
    with respx.mock() as router:
        router.post(wire.endpoints[config.protocol]).mock(return_value=response)
        async with httpx.AsyncClient(verify=TLS) as client:
            try:
                return await build_provider(config, client).call(request)
            except ProviderError as exc:
                return exc


# -- OpenAI and openai-compatible ---------------------------------------------------------


@pytest.mark.parametrize("protocol", OPENAI_LIKE)
async def test_openai_429_rate_limit_takes_retry_after_ms_over_whole_seconds(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
) -> None:
    headers = {
        **OPENAI_HEADERS,
        "x-ratelimit-remaining-requests": "0",
        "retry-after": "1",
        "retry-after-ms": "120",
    }
    error = await answer(
        wire, make_config(protocol), make_request(), 429, OPENAI_RATE_LIMIT, headers
    )
    assert type(error) is RateLimited
    assert error.retry_after == pytest.approx(0.12)
    assert error.reason == "status_429" and error.status_code == 429
    assert error.limits == RateLimits(60, 0, 1.0, 150000, 149984, 360.0)
    assert error.as_dict()["capacity"] == "rate_limited"
    assert error.as_dict()["retry_after_s"] == 0.12
    assert "Rate limit reached" in str(error)


@pytest.mark.parametrize("protocol", OPENAI_LIKE)
async def test_openai_429_without_retry_after_waits_for_the_empty_bucket(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
) -> None:
    headers = {
        **OPENAI_HEADERS,
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-tokens": "2m3.5s",
    }
    error = await answer(
        wire, make_config(protocol), make_request(), 429, OPENAI_RATE_LIMIT, headers
    )
    assert type(error) is RateLimited
    assert error.retry_after == pytest.approx(123.5)  # the tokens bucket, not the requests one


@pytest.mark.parametrize("protocol", OPENAI_LIKE)
async def test_openai_429_that_says_nothing_has_no_retry_after(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
) -> None:
    """Remaining requests above 0: which bucket refused is not known, so no wait is made up."""
    error = await answer(
        wire, make_config(protocol), make_request(), 429, OPENAI_RATE_LIMIT, OPENAI_HEADERS
    )
    assert type(error) is RateLimited
    assert error.retry_after is None
    assert error.limits is not None and error.limits.said()


@pytest.mark.parametrize("protocol", OPENAI_LIKE)
@pytest.mark.parametrize(
    "error_body",
    [
        OPENAI_QUOTA,
        {"error": {"message": "Billing hard limit has been reached",
                   "type": "invalid_request_error", "param": None,
                   "code": "billing_hard_limit_reached"}},
        {"error": {"message": "Your account is not active, please check your billing details "
                   "on our website.", "type": "billing_not_active", "param": None, "code": None}},
    ],
    ids=["insufficient_quota", "billing_hard_limit_reached", "billing_not_active"],
)  # fmt: skip
async def test_openai_spent_quota_is_quota_exhausted_even_with_a_retry_after(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
    error_body: dict[str, Any],
) -> None:
    headers = {"retry-after": "20"}
    error = await answer(wire, make_config(protocol), make_request(), 429, error_body, headers)
    assert type(error) is QuotaExhausted
    assert not isinstance(error, NoCapacity)
    assert isinstance(error, DefiniteFailure)
    assert error.reason == "quota_exhausted" and error.status_code == 429
    assert "capacity" not in error.as_dict()


@pytest.mark.parametrize("protocol", OPENAI_LIKE)
async def test_openai_503_engine_overloaded_is_overloaded_with_its_retry_after(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
) -> None:
    error = await answer(
        wire, make_config(protocol), make_request(), 503, OPENAI_OVERLOADED, {"retry-after": "3"}
    )
    assert type(error) is Overloaded
    assert error.retry_after == 3.0 and error.reason == "status_503"
    assert error.limits is None


async def test_openai_500_is_unavailable_not_overloaded(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    body = {"error": {"message": "The server had an error while processing your request.",
                      "type": "server_error", "param": None, "code": None}}  # fmt: skip
    error = await answer(wire, make_config("openai"), make_request(), 500, body)
    assert type(error) is Unavailable


# -- Anthropic ----------------------------------------------------------------------------


async def test_anthropic_429_rate_limit_error_reads_retry_after_and_the_tightest_tokens(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    body = anthropic_error(
        "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit."
    )
    headers = {**anthropic_headers(requests_remaining=0), "retry-after": "7"}
    error = await answer(wire, make_config("anthropic"), make_request(), 429, body, headers)
    assert type(error) is RateLimited
    assert error.retry_after == 7.0
    limits = error.limits
    assert limits is not None
    assert (limits.requests_limit, limits.requests_remaining) == (50, 0)
    assert limits.requests_reset_s == pytest.approx(30, abs=1.5)
    # the output bucket has the fewest tokens left: it is the one reported
    assert (limits.tokens_limit, limits.tokens_remaining) == (8000, 1200)
    assert limits.tokens_reset_s == pytest.approx(50, abs=1.5)


async def test_anthropic_429_without_retry_after_waits_until_the_requests_reset(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    body = anthropic_error("rate_limit_error", "This request would exceed the rate limit.")
    headers = anthropic_headers(requests_remaining=0, reset_in=12)
    error = await answer(wire, make_config("anthropic"), make_request(), 429, body, headers)
    assert type(error) is RateLimited
    assert error.retry_after == pytest.approx(12, abs=1.5)


@pytest.mark.parametrize("status", [529, 503, 500])
async def test_anthropic_overloaded_error_is_overloaded_whatever_its_status(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    status: int,
) -> None:
    body = anthropic_error("overloaded_error", "Overloaded")
    error = await answer(wire, make_config("anthropic"), make_request(), status, body)
    assert type(error) is Overloaded
    assert error.reason == f"status_{status}"


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (402, anthropic_error("billing_error", "Your payment method was declined.")),
        (400, anthropic_error("invalid_request_error", "Your credit balance is too low to "
                              "access the Anthropic API. Please go to Plans & Billing to upgrade "
                              "or purchase credits.")),
        (400, anthropic_error("invalid_request_error", "You have reached your specified API "
                              "usage limits. You will regain access on 2025-07-01 at 00:00 UTC.")),
        (429, anthropic_error("rate_limit_error", "You have reached your monthly spend limit.",
                              details={"error_code": "enforced_spend_limit_reached"})),
        (429, anthropic_error("rate_limit_error", "Your contract's spend limit is reached.",
                              details={"error_code": "contract_spend_limit_reached"})),
    ],
    ids=["402-billing", "400-credit-balance", "400-usage-limits", "429-monthly-spend",
         "429-contract-spend"],
)  # fmt: skip
async def test_anthropic_billing_answers_are_quota_exhausted(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    status: int,
    body: dict[str, Any],
) -> None:
    error = await answer(wire, make_config("anthropic"), make_request(), status, body)
    assert type(error) is QuotaExhausted
    assert not isinstance(error, NoCapacity)
    assert error.status_code == status and error.reason == "quota_exhausted"


async def test_anthropic_ramp_limit_is_a_rate_limit_not_a_quota(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    body = anthropic_error(
        "rate_limit_error", "Usage grows too fast.", details={"error_code": "ramp_limit_exceeded"}
    )
    error = await answer(
        wire, make_config("anthropic"), make_request(), 429, body, {"retry-after": "4"}
    )
    assert type(error) is RateLimited and error.retry_after == 4.0


async def test_an_ordinary_anthropic_400_stays_rejected(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    body = anthropic_error("invalid_request_error", "max_tokens: Field required")
    error = await answer(wire, make_config("anthropic"), make_request(), 400, body)
    assert type(error) is Rejected


# -- Gemini -------------------------------------------------------------------------------


async def test_gemini_per_minute_429_waits_its_retry_info(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    body = gemini_429(PER_MINUTE, retry_info("58s"))
    error = await answer(wire, make_config("gemini"), make_request(), 429, body)
    assert type(error) is RateLimited
    assert error.retry_after == 58.0
    assert error.limits is None  # Gemini announces no limits
    assert error.as_dict()["retry_after_s"] == 58.0


async def test_gemini_fractional_retry_delay_and_a_header_that_overrides_it(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    body = gemini_429(PER_MINUTE, retry_info("1.500s"))
    error = await answer(wire, make_config("gemini"), make_request(), 429, body)
    assert error.retry_after == 1.5
    headers = {"retry-after": "9"}
    error = await answer(wire, make_config("gemini"), make_request(), 429, body, headers)
    assert error.retry_after == 9.0


@pytest.mark.parametrize(
    "details",
    [
        (PER_DAY,),
        (PER_DAY, retry_info("30s")),  # a short RetryInfo does not make a daily quota come back
        (quota_failure("GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
                       "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                       value="0"), retry_info("40s")),
    ],
    ids=["per-day", "per-day-with-retry-info", "limit-0"],
)  # fmt: skip
async def test_gemini_daily_or_zero_quota_is_quota_exhausted(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    details: tuple[dict[str, Any], ...],
) -> None:
    error = await answer(wire, make_config("gemini"), make_request(), 429, gemini_429(*details))
    assert type(error) is QuotaExhausted
    assert not isinstance(error, NoCapacity)


async def test_gemini_429_without_details_is_a_rate_limit_that_said_no_wait(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    body = {"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                      "status": "RESOURCE_EXHAUSTED"}}  # fmt: skip
    error = await answer(wire, make_config("gemini"), make_request(), 429, body)
    assert type(error) is RateLimited and error.retry_after is None


async def test_gemini_503_unavailable_is_overloaded(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    error = await answer(wire, make_config("gemini"), make_request(), 503, GEMINI_UNAVAILABLE)
    assert type(error) is Overloaded
    body = {"error": {**GEMINI_UNAVAILABLE["error"], "details": [retry_info("2s")]}}
    error = await answer(wire, make_config("gemini"), make_request(), 503, body)
    assert type(error) is Overloaded and error.retry_after == 2.0


# -- every protocol -----------------------------------------------------------------------

ALL = pytest.mark.parametrize("protocol", ("openai", "anthropic", "gemini", "openai-compatible"))

GARBAGE_BODIES = [
    b"<html>429 Too Many Requests</html>",
    b"[1, 2]",
    b'{"error": "slow down"}',
    b'{"error": {"code": ["insufficient_quota"], "type": {"a": 1}, "details": "x"}}',
    b'{"error": {"details": [1, {"@type": "type.googleapis.com/google.rpc.RetryInfo", '
    b'"retryDelay": 5}, {"@type": "type.googleapis.com/google.rpc.QuotaFailure", '
    b'"violations": "x"}], "status": ["RESOURCE_EXHAUSTED"]}}',
    b'{"type": "error", "error": {"type": "rate_limit_error", "message": 7, "details": [1]}}',
]


@ALL
@pytest.mark.parametrize("body", GARBAGE_BODIES)
async def test_a_429_with_a_body_nobody_wrote_is_still_a_rate_limit(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
    body: bytes,
) -> None:
    headers = {
        "retry-after": "soon",
        "retry-after-ms": "-4",
        "x-ratelimit-remaining-requests": "many",
        "x-ratelimit-reset-requests": "whenever",
        "anthropic-ratelimit-requests-reset": "tomorrow",
        "anthropic-ratelimit-tokens-remaining": "-1",
    }
    error = await answer(wire, make_config(protocol), make_request(), 429, body, headers)
    assert type(error) is RateLimited
    assert error.retry_after is None
    assert error.limits is None


@ALL
async def test_a_status_configured_unknown_stays_unknown_even_when_it_is_an_overload(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
) -> None:
    """An operator who says 529 may come after the work was done is believed first."""
    config = make_config(protocol, unknown_statuses=frozenset({529}))
    body = anthropic_error("overloaded_error", "Overloaded")
    error = await answer(wire, config, make_request(), 529, body)
    assert type(error) is AmbiguousStatus


def test_quota_exhausted_is_never_no_capacity() -> None:
    assert issubclass(QuotaExhausted, DefiniteFailure)
    assert not issubclass(QuotaExhausted, NoCapacity)
    assert issubclass(RateLimited, NoCapacity) and issubclass(Overloaded, NoCapacity)
    assert not issubclass(Unavailable, NoCapacity)


def test_no_capacity_as_dict_rounds_retry_after_to_the_millisecond() -> None:
    error = RateLimited("slow down", retry_after=0.123456, status_code=429, reason="status_429")
    assert error.as_dict() == {
        "outcome": "definite",
        "reason": "status_429",
        "message": "slow down",
        "status_code": 429,
        "request_id": None,
        "capacity": "rate_limited",
        "retry_after_s": 0.123,
    }
    assert Overloaded().as_dict()["capacity"] == "overloaded"
    assert Overloaded().reason == "overloaded" and RateLimited().reason == "rate_limited"


# -- limits on successful answers ---------------------------------------------------------


@pytest.mark.parametrize("protocol", OPENAI_LIKE)
async def test_openai_success_carries_the_announced_limits(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
) -> None:
    body = wire.body(protocol, json.dumps(wire.answer))
    result = await answer(wire, make_config(protocol), make_request(), 200, body, OPENAI_HEADERS)
    assert result.output == wire.answer
    assert result.limits == RateLimits(60, 59, 1.0, 150000, 149984, 360.0)


async def test_anthropic_success_carries_the_announced_limits(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    body = wire.body("anthropic", json.dumps(wire.answer))
    result = await answer(
        wire, make_config("anthropic"), make_request(), 200, body, anthropic_headers()
    )
    assert result.limits is not None
    assert (result.limits.requests_limit, result.limits.requests_remaining) == (50, 49)
    assert result.limits.tokens_remaining == 1200


@ALL
async def test_a_success_without_limit_headers_has_no_limits(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
    protocol: str,
) -> None:
    body = wire.body(protocol, json.dumps(wire.answer))
    result = await answer(wire, make_config(protocol), make_request(), 200, body)
    assert result.output == wire.answer and result.limits is None


async def test_gemini_ignores_headers_it_never_sends(
    wire: Any,
    make_config: Callable[..., ProviderConfig],
    make_request: Callable[..., ProviderRequest],
) -> None:
    body = wire.body("gemini", json.dumps(wire.answer))
    result = await answer(wire, make_config("gemini"), make_request(), 200, body, OPENAI_HEADERS)
    assert result.limits is None
