"""Injected time and identity, so timeouts and races are deterministic in tests."""

from __future__ import annotations

import datetime as dt
from typing import Protocol

from ulid import ULID


def aware(value: dt.datetime) -> dt.datetime:
    """Read a stored timestamp (naive means UTC) as timezone-aware."""
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


class Clock(Protocol):
    """Tell the current time (UTC, timezone-aware)."""

    def now(self) -> dt.datetime: ...


class SystemClock:
    """The wall clock."""

    def now(self) -> dt.datetime:
        """Return the current UTC time."""
        return dt.datetime.now(dt.UTC)


class ManualClock:
    """A clock that moves only when told to: a test double shipped with the product."""

    def __init__(self, start: dt.datetime | None = None) -> None:
        self._now = start or dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    def now(self) -> dt.datetime:
        """Return the frozen time."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds``."""
        self._now += dt.timedelta(seconds=seconds)


class IdFactory(Protocol):
    """Make new identifiers with a type prefix."""

    def new(self, prefix: str) -> str: ...


class UlidFactory:
    """Sortable ids: ``job_01J...``, ``att_01J...``, their time read from ``clock``."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock

    def new(self, prefix: str) -> str:
        """Return ``<prefix>_<ULID>``."""
        if self.clock is None:
            return f"{prefix}_{ULID()}"
        return f"{prefix}_{ULID.from_datetime(self.clock.now())}"


class SequentialIds:
    """Predictable ids for tests: ``job_0001``, ``att_0002`` ..."""

    def __init__(self) -> None:
        self._n = 0

    def new(self, prefix: str) -> str:
        """Return the next id with ``prefix``."""
        self._n += 1
        return f"{prefix}_{self._n:04d}"
