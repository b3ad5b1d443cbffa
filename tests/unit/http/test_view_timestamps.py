"""Times in answers are RFC 3339 UTC with milliseconds and a ``Z``, whatever their zone."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from gateway.http.views import timestamp

utc = st.datetimes(timezones=st.just(dt.UTC))


@given(utc)
def test_a_utc_time_is_spelled_as_its_naive_twin(value: dt.datetime) -> None:
    assert timestamp(value) == timestamp(value.replace(tzinfo=None))


@given(utc, st.integers(min_value=-14 * 60, max_value=14 * 60))
def test_another_zone_is_converted_first(value: dt.datetime, minutes: int) -> None:
    zone = dt.timezone(dt.timedelta(minutes=minutes))
    assert timestamp(value.astimezone(zone)) == timestamp(value)


def test_the_spelling() -> None:
    value = dt.datetime(2026, 12, 3, 6, 7, 8, 123456, tzinfo=dt.UTC)
    assert timestamp(value) == "2026-12-03T06:07:08.123Z"
    assert timestamp(None) is None
