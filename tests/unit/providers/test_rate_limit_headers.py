"""Reading what the APIs say about their limits: Go durations, RFC 3339 times, protobuf
durations, ``Retry-After`` in all its spellings. A value nobody meant is not said (None),
never an exception: these run on every successful answer."""

from __future__ import annotations

import math

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from providers.anthropic.capacity import limits_of as anthropic_limits
from providers.anthropic.capacity import rfc3339_in, rfc3339_text
from providers.base import RateLimits
from providers.capacity import header_int, headers_with_prefix, retry_after_seconds
from providers.gemini.capacity import duration_seconds, duration_text
from providers.openai.capacity import go_duration, go_duration_text
from providers.openai.capacity import limits_of as openai_limits

NOW = 1_736_951_040.0  # 2025-01-15T14:24:00Z


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1.0),
        ("0.3s", 0.3),
        ("20ms", 0.02),
        ("6m0s", 360.0),
        ("1h2m3.5s", 3723.5),
        ("17.28s", 17.28),
        ("2m59.56s", 179.56),
        ("1m20ms", 60.02),
        ("500us", 0.0005),
        ("500µs", 0.0005),
        ("0s", 0.0),
        (" 1s ", 1.0),
    ],
)
def test_go_durations_as_openai_sends_them(text: str, seconds: float) -> None:
    assert go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1", "1.5", "s", "-1s", "1x", "1s2", "ms", "1h-2m", "∞s"])
def test_go_durations_that_are_not_say_nothing(text: str) -> None:
    assert go_duration(text) is None


@pytest.mark.parametrize("seconds", [0.0, 0.001, 0.1, 0.999, 1.0, 1.5, 59.999, 60.0, 360.0, 3723.5])
def test_go_duration_text_reads_back_as_at_least_the_value(seconds: float) -> None:
    text = go_duration_text(seconds)
    read = go_duration(text)
    assert read is not None and seconds <= read < seconds + 0.0011
    assert text == {0.1: "100ms", 60.0: "1m0s", 360.0: "6m0s", 3723.5: "1h2m3.5s"}.get(
        seconds, text
    )


@given(st.text(max_size=30))
def test_go_duration_never_raises(text: str) -> None:
    value = go_duration(text)
    assert value is None or (math.isfinite(value) and value >= 0)


def test_rfc3339_times_are_read_relative_to_now() -> None:
    assert rfc3339_in("2025-01-15T14:24:30Z", NOW) == 30.0
    assert rfc3339_in("2025-01-15T14:24:00.5+00:00", NOW) == 0.5
    assert rfc3339_in("2025-01-15T15:24:30+01:00", NOW) == 30.0
    assert rfc3339_in("2025-01-15T14:23:00Z", NOW) == 0.0  # past: now
    assert rfc3339_in("2025-01-15T14:24:30", NOW) == 30.0  # no offset: UTC
    assert rfc3339_text(NOW + 29.2) == "2025-01-15T14:24:30Z"  # whole seconds, rounded up


@given(st.text(max_size=40))
def test_rfc3339_never_raises(text: str) -> None:
    value = rfc3339_in(text, NOW)
    assert value is None or (math.isfinite(value) and value >= 0)


def test_protobuf_durations_as_gemini_sends_them() -> None:
    assert duration_seconds("30s") == 30.0
    assert duration_seconds("1.500s") == 1.5
    assert duration_seconds("58.217843437s") == pytest.approx(58.217843437)
    for garbage in (None, 30, "30", "s", "-1s", "nans", "infs"):
        assert duration_seconds(garbage) is None
    assert duration_text(30) == "30s"
    assert duration_text(0.1) == "0.100s"


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "2.5"}, 2.5),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after-ms": "120", "retry-after": "1"}, 0.12),
        ({"retry-after-ms": "soon", "retry-after": "3"}, 3.0),
        ({"retry-after-ms": "-5", "retry-after": "3"}, 3.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:30 GMT"}, 30.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:27:30 GMT"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "-3"}, None),
        ({"retry-after": "1e999"}, None),
        ({"retry-after": "Wed, 99 Oct 2015 07:28:30 GMT"}, None),
        ({}, None),
    ],
)
def test_retry_after_in_every_spelling(headers: dict[str, str], seconds: float | None) -> None:
    assert retry_after_seconds(httpx.Headers(headers), now=1445412480.0) == seconds


@given(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=40))
def test_retry_after_never_raises(value: str) -> None:
    for name in ("retry-after", "retry-after-ms"):
        seconds = retry_after_seconds(httpx.Headers({name: value}))
        assert seconds is None or (math.isfinite(seconds) and seconds >= 0)


def test_headers_are_read_whatever_their_case_in_one_pass() -> None:
    headers = httpx.Headers([("X-RateLimit-Limit-Requests", "60"), ("x-request-id", "r")])
    assert headers_with_prefix(headers, b"x-ratelimit-") == {"limit-requests": "60"}
    assert openai_limits(headers) == RateLimits(requests_limit=60)
    assert header_int("12") == 12
    assert [header_int(v) for v in (None, "", "-1", "1.5", "x")] == [None] * 5


def test_no_limit_headers_is_none_not_an_empty_limits() -> None:
    headers = httpx.Headers({"content-type": "application/json", "x-request-id": "r"})
    assert openai_limits(headers) is None
    assert anthropic_limits(headers) is None
    assert openai_limits(httpx.Headers({"x-ratelimit-limit-requests": "lots"})) is None


def test_anthropic_tightest_token_bucket_is_the_one_with_fewest_tokens_left() -> None:
    headers = httpx.Headers(
        {
            "anthropic-ratelimit-tokens-limit": "100000",
            "anthropic-ratelimit-tokens-remaining": "90000",
            "anthropic-ratelimit-tokens-reset": "2025-01-15T14:24:10Z",
            "anthropic-ratelimit-input-tokens-limit": "80000",
            "anthropic-ratelimit-input-tokens-remaining": "10",
            "anthropic-ratelimit-input-tokens-reset": "2025-01-15T14:24:50Z",
            "anthropic-ratelimit-output-tokens-limit": "20000",
            "anthropic-ratelimit-output-tokens-remaining": "15000",
        }
    )
    assert anthropic_limits(headers, NOW) == RateLimits(
        tokens_limit=80000, tokens_remaining=10, tokens_reset_s=50.0
    )


def test_the_empty_bucket_decides_the_wait() -> None:
    assert RateLimits(requests_remaining=0, requests_reset_s=2.0).exhausted_reset_s() == 2.0
    both = RateLimits(0, 0, 2.0, None, 0, 9.0)
    assert both.exhausted_reset_s() == 9.0
    assert RateLimits(requests_remaining=3, requests_reset_s=2.0).exhausted_reset_s() is None
    assert RateLimits(requests_remaining=0).exhausted_reset_s() is None
    assert not RateLimits().said() and RateLimits(tokens_reset_s=0.0).said()
