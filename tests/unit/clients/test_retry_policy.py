"""When the client tries again, how long it waits, and when it gives up."""

from __future__ import annotations

import email.utils

import httpx
import pytest
from onejob_client import QueueFull, RetryPolicy, Unavailable
from onejob_client.retry import Retrying, parse_retry_after


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def retrying(policy: RetryPolicy, clock: Clock, rng: float = 1.0) -> Retrying:
    return Retrying(policy, clock=clock, rng=lambda: rng)


def test_retry_after_is_read_as_seconds_or_as_a_date() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    date = email.utils.formatdate(1_000_030.0, usegmt=True)
    assert parse_retry_after(date, now=1_000_000.0) == pytest.approx(30.0)


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_not_now_statuses_are_retried_after_retry_after(status: int) -> None:
    r = retrying(RetryPolicy(), Clock(), rng=0.0)
    r.timeout()
    assert r.wait_after_status(status, {"retry-after": "2"}) == 2.0


@pytest.mark.parametrize("status", [200, 201, 400, 401, 404, 408, 409, 413, 422, 500])
def test_every_other_answer_is_final(status: int) -> None:
    r = retrying(RetryPolicy(), Clock())
    r.timeout()
    assert r.wait_after_status(status, {"retry-after": "1"}) is None


def test_the_backoff_doubles_with_jitter_up_to_its_cap() -> None:
    policy = RetryPolicy(initial_backoff=0.25, max_backoff=1.0, deadline=100)
    clock = Clock()
    low, high = retrying(policy, clock, 0.0), retrying(policy, clock, 1.0)
    seen = []
    for _ in range(5):
        low.timeout()
        high.timeout()
        seen.append((low.backoff(), high.backoff()))
    assert seen == [(0.125, 0.25), (0.25, 0.5), (0.5, 1.0), (0.5, 1.0), (0.5, 1.0)]


def test_no_answer_is_retried_but_a_bad_url_is_not() -> None:
    r = retrying(RetryPolicy(), Clock())
    r.timeout()
    assert r.wait_after_error(httpx.ConnectError("refused")) > 0
    assert r.wait_after_error(httpx.ReadTimeout("slow")) > 0
    assert r.wait_after_error(httpx.RemoteProtocolError("reset")) > 0
    with pytest.raises(httpx.UnsupportedProtocol):
        r.wait_after_error(httpx.UnsupportedProtocol("ftp://"))


def test_a_wait_past_the_deadline_gives_up_with_unavailable() -> None:
    clock = Clock()
    r = retrying(RetryPolicy(deadline=5.0), clock)
    r.timeout()
    r.note_outcome("unknown")
    assert r.wait_after_status(503, {"retry-after": "1"}) is not None
    clock.now += 4.5
    r.timeout()
    with pytest.raises(Unavailable) as raised:
        r.wait_after_status(503, {"retry-after": "1"})
    assert (raised.value.tries, raised.value.last_status) == (2, 503)
    assert raised.value.outcome == "unknown"


def test_a_try_never_outlives_the_deadline() -> None:
    clock = Clock()
    r = retrying(RetryPolicy(deadline=10.0, request_timeout=30.0), clock)
    assert r.timeout() == 10.0
    assert r.timeout(extra=5.0) == 10.0
    clock.now += 9.95
    assert r.timeout() == 0.1


def test_a_full_queue_is_retried_after_retry_after_and_gives_up_with_queue_full() -> None:
    clock = Clock()
    r = retrying(RetryPolicy(deadline=8.0), clock, rng=0.0)
    r.timeout()
    r.note_outcome(None, "urn:onejob:queue-full")
    assert r.wait_after_status(503, {"retry-after": "5"}) == 5.0
    clock.now += 5.0
    r.timeout()
    r.note_outcome(None, "urn:onejob:queue-full")
    with pytest.raises(QueueFull) as raised:
        r.wait_after_status(503, {"retry-after": "5"})
    assert isinstance(raised.value, Unavailable)
    assert (raised.value.tries, raised.value.last_status) == (2, 503)


def test_only_a_full_queue_as_the_last_answer_gives_queue_full() -> None:
    r = retrying(RetryPolicy(deadline=0.2), Clock())
    r.timeout()
    r.note_outcome(None, "urn:onejob:queue-full")
    with pytest.raises(Unavailable) as raised:
        r.wait_after_error(httpx.ConnectError("refused"))  # then no answer at all
    assert type(raised.value) is Unavailable
