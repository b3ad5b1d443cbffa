"""Days to a certificate's expiry, as the API, the console and both processes' gauge read it."""

from __future__ import annotations

import datetime as dt

from contracts.registry_file import days_to_expiry

NOW = dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.UTC)


def test_days_to_expiry_counts_fractions_and_goes_negative_once_past() -> None:
    assert days_to_expiry({"expires_at": "2026-12-07T00:00:00Z"}, NOW) == 2.5
    assert days_to_expiry({"expires_at": "2026-12-03T12:00:00Z"}, NOW) == -1.0


def test_a_naive_timestamp_is_utc() -> None:
    assert days_to_expiry({"expires_at": "2026-12-05T12:00:00"}, NOW) == 1.0


def test_a_certificate_without_a_readable_expiry_has_none() -> None:
    # The worker's pass used to raise on these (and log the whole pass as failed).
    assert days_to_expiry({}, NOW) is None
    assert days_to_expiry({"expires_at": None}, NOW) is None
    assert days_to_expiry({"expires_at": "next tuesday"}, NOW) is None
