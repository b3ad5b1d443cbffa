"""Job and attempt ids are ULIDs: python-ulid's spelling, the clock's millisecond."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st
from ulid import ULID

from gateway.domain.clock import ManualClock, UlidFactory, ulid_text


@given(st.integers(min_value=0, max_value=2**48 - 1), st.binary(min_size=10, max_size=10))
def test_the_text_is_python_ulids(milliseconds: int, randomness: bytes) -> None:
    expected = str(ULID.from_bytes(milliseconds.to_bytes(6, "big") + randomness))
    assert ulid_text(milliseconds, int.from_bytes(randomness, "big")) == expected


def test_an_id_carries_the_clocks_millisecond_and_sorts_by_it() -> None:
    clock = ManualClock(dt.datetime(2026, 12, 3, 6, 0, 0, 123456, tzinfo=dt.UTC))
    ids = UlidFactory(clock)
    first = ids.new("job")
    clock.advance(0.001)
    second = ids.new("job")
    assert first.startswith("job_") and len(first) == 4 + 26
    assert ULID.from_str(first[4:]).datetime == dt.datetime(
        2026, 12, 3, 6, 0, 0, 123000, tzinfo=dt.UTC
    )
    assert first < second


def test_ids_of_one_millisecond_rise_in_the_order_they_were_made() -> None:
    ids = UlidFactory(ManualClock())
    made = [ids.new("att") for _ in range(1000)]
    assert made == sorted(made) and len(set(made)) == 1000
    assert len({m[4:14] for m in made}) == 1  # one millisecond


def test_a_new_millisecond_draws_fresh_randomness() -> None:
    clock = ManualClock()
    ids = UlidFactory(clock)
    first = ULID.from_str(ids.new("job")[4:])
    clock.advance(0.001)
    second = ULID.from_str(ids.new("job")[4:])
    assert second.milliseconds == first.milliseconds + 1
    assert int.from_bytes(second.bytes[6:], "big") != int.from_bytes(first.bytes[6:], "big") + 1


def test_without_a_clock_the_id_is_now() -> None:
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    made = ULID.from_str(UlidFactory().new("job")[4:]).datetime
    assert before <= made <= dt.datetime.now(dt.UTC)


@given(st.datetimes(min_value=dt.datetime(1971, 1, 1), max_value=dt.datetime(9999, 1, 1)))
def test_retentions_id_bound_carries_python_ulids_time(cutoff: dt.datetime) -> None:
    from gateway.store.prune import id_bound

    moment = cutoff.replace(tzinfo=dt.UTC)
    assert id_bound(moment) == f"job_{str(ULID.from_datetime(moment))[:10]}{'Z' * 16}"
