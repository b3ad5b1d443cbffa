"""Rows to records: the fast time and enum conversions give what the slow ones gave."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.domain.states import AttemptReason, AttemptState, JobStatus
from gateway.store.rows import (
    attempt_reason,
    attempt_state,
    aware_utc,
    job_status,
    naive_utc,
)

#: Fixed offsets as a database driver or a caller's clock may carry them (±23:59).
offsets = st.builds(
    dt.timezone,
    st.timedeltas(
        min_value=dt.timedelta(hours=-23, minutes=-59), max_value=dt.timedelta(hours=23, minutes=59)
    ),
)


def _outcome(convert: object, value: dt.datetime) -> object:
    """What ``convert(value)`` gives, or the class of what it raises (out of range)."""
    try:
        return convert(value)  # type: ignore[operator]
    except OverflowError as exc:
        return type(exc)


@given(st.datetimes())
def test_a_stored_time_becomes_the_same_aware_utc_as_by_replace(value: dt.datetime) -> None:
    made = aware_utc(value)
    assert made == value.replace(tzinfo=dt.UTC)
    assert made is not None and made.tzinfo is dt.UTC
    assert made.replace(tzinfo=None) == value  # the wall time, to the microsecond


@given(st.datetimes(timezones=offsets))
def test_an_aware_time_becomes_the_same_naive_utc_as_by_astimezone(value: dt.datetime) -> None:
    expected = _outcome(lambda v: v.astimezone(dt.UTC).replace(tzinfo=None), value)
    made = _outcome(naive_utc, value)
    assert made == expected
    if isinstance(made, dt.datetime):
        assert made.tzinfo is None


@given(st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1)))
def test_naive_and_aware_utc_undo_each_other(value: dt.datetime) -> None:
    assert naive_utc(aware_utc(value)) == value  # type: ignore[arg-type]


def test_an_aware_time_keeps_its_instant_and_a_naive_one_is_local_time() -> None:
    paris = dt.timezone(dt.timedelta(hours=1))
    assert naive_utc(dt.datetime(2026, 12, 3, 20, 0, tzinfo=paris)) == dt.datetime(
        2026, 12, 3, 19, 0
    )
    local = dt.datetime(2026, 12, 3, 20, 0)
    assert naive_utc(local) == local.astimezone(dt.UTC).replace(tzinfo=None)
    assert aware_utc(None) is None
    # An aware time is given UTC as its zone (its wall time kept), as ``replace`` did.
    assert aware_utc(dt.datetime(2026, 12, 3, 20, 0, tzinfo=paris)) == dt.datetime(
        2026, 12, 3, 20, 0, tzinfo=dt.UTC
    )


@pytest.mark.parametrize(
    ("lookup", "kind"),
    [(attempt_reason, AttemptReason), (attempt_state, AttemptState), (job_status, JobStatus)],
)
def test_an_enum_is_looked_up_by_value_as_the_enum_would(lookup: object, kind: type) -> None:
    for member in kind:
        assert lookup(member.value) is member  # type: ignore[operator]
        assert lookup(member) is member  # type: ignore[operator]
    with pytest.raises(ValueError, match="not a valid"):
        lookup("no-such-value")  # type: ignore[operator]
