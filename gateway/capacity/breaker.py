"""A circuit breaker per provider (issue 43): stop sending to a provider that keeps failing.

``closed``: calls go. After ``failures`` consecutive counted failures (what counts is
``[capacity] breaker_counts``: failures, timeouts, overloads, and rate limits if asked)
the circuit opens: nothing is sent to the provider for ``open_s`` seconds, and attempts
go straight to the next certified fallback, or wait. Then one call may go as a probe
(``half_open``): an answer closes the circuit, a counted failure opens it again. A probe
that never reports (its process died) is replaced by another after ``open_s``.

Every process keeps its own breaker; one that opens tells the others (the shared
capacity), which open theirs until the same time, so a cluster stops sending together.
"""

from __future__ import annotations

import enum


class Circuit(enum.StrEnum):
    """Where a provider's circuit stands."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class Breaker:
    """One provider's circuit, in this process."""

    def __init__(self, failures: int, open_s: float) -> None:
        self.threshold = failures  #: 0: never opens
        self.open_s = open_s
        self.state = Circuit.CLOSED
        self.failures = 0  #: consecutive counted failures
        self.until = 0.0  #: wall time the open circuit allows a probe (or a probe expires)

    def wait(self, now: float) -> float:
        """Seconds before a call may go (0: now); the call that gets 0 on an open circuit
        past its time is the probe, and the circuit is half open until it reports."""
        if self.state is Circuit.CLOSED:
            return 0.0
        if now < self.until:
            return self.until - now
        # Open and due, or a probe that never reported: this call is the probe.
        self.state = Circuit.HALF_OPEN
        self.until = now + self.open_s
        return 0.0

    def succeeded(self) -> bool:
        """A call was answered; say whether that closed the circuit."""
        self.failures = 0
        if self.state is Circuit.CLOSED:
            return False
        self.state = Circuit.CLOSED
        return True

    def failed(self, now: float) -> bool:
        """A counted failure; say whether it opened the circuit."""
        self.failures += 1
        if self.state is Circuit.HALF_OPEN or (
            self.state is Circuit.CLOSED and self.threshold and self.failures >= self.threshold
        ):
            self.state = Circuit.OPEN
            self.until = now + self.open_s
            return True
        return False

    def opened_elsewhere(self, until: float, now: float) -> None:
        """Another process opened the circuit until ``until``: open this one as long."""
        if until > now and (self.state is Circuit.CLOSED or until > self.until):
            self.state = Circuit.OPEN
            self.until = until

    def closed_elsewhere(self) -> None:
        """Another process's probe was answered: close this one too."""
        if self.state is not Circuit.CLOSED:
            self.state = Circuit.CLOSED
            self.failures = 0
