"""Pacing one provider's calls, so the gateway stops running into its limit (issue 43).

A provider is paced only once a limit is known: configured (``[providers.NAME.limits]``:
``requests_per_minute``, ``tokens_per_minute``, ``max_concurrency``), announced by the
provider itself (OpenAI's ``x-ratelimit-*``, Anthropic's ``anthropic-ratelimit-*``
headers, read into ``RateLimits``), or estimated after it refused without announcing one
(halved at each 429, a little higher with each answer after it: additive increase,
multiplicative decrease). Until then a call costs one timestamp here (the answers of the
last seconds, whose rate a first 429 halves).

Each process paces by its slice of the limit: the limit divided by the processes pacing
that provider now (``share``, from the shared capacity, ``sharing``), so two gateways and
a worker on one database stay under one quota together. Calls are spaced evenly (token
buckets of one call's burst), as a provider that counts per second or per minute takes
them without a 429.

A pause (a 429 that named its time, or whose provider announced none) holds every call
of the provider until it ends; the pause is shared with the other processes.
"""

from __future__ import annotations

import collections
import dataclasses

from providers.base import RateLimits
from providers.config import ProviderLimits

#: Calls per second an estimated limit never goes below.
MIN_ESTIMATE = 0.2
#: How much an estimated rate grows with each answered call (1 %: it doubles in ~70 calls).
ESTIMATE_GROWTH = 1.01
#: Seconds without a 429 after which an estimated limit is forgotten.
ESTIMATE_FORGOTTEN = 60.0
#: Seconds of answered calls the rate a refusal halves is measured over.
RATE_WINDOW = 10.0
#: Tokens a bucket may be short of and still let a call go (a float's rounding).
TOKEN_SLACK = 1e-6
#: How long a runner waits to look again at a provider whose concurrency is full.
CONCURRENCY_LOOK = 0.05


class Bucket:
    """A token bucket: ``rate`` tokens a second, at most ``burst`` kept."""

    __slots__ = ("at", "burst", "level", "rate")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate, self.burst, self.level, self.at = rate, burst, burst, now

    def _refill(self, now: float) -> None:
        if now > self.at:
            self.level = min(self.burst, self.level + (now - self.at) * self.rate)
            self.at = now

    def wait(self, cost: float, now: float) -> float:
        """Seconds until ``cost`` tokens are there (0: now)."""
        self._refill(now)
        need = min(cost, self.burst) - self.level
        return 0.0 if need <= TOKEN_SLACK else need / self.rate

    def take(self, cost: float, now: float) -> None:
        """Spend ``cost`` tokens (the level may go below zero: a debt paid by waiting)."""
        self._refill(now)
        self.level -= cost

    def retune(self, rate: float, burst: float, now: float) -> None:
        """Change the rate; what is kept stays, up to the new burst."""
        self._refill(now)
        self.rate, self.burst = rate, burst
        self.level = min(self.level, burst)


@dataclasses.dataclass(slots=True)
class Known:
    """The limits of one provider, by where they come from (per minute; None: unknown)."""

    configured_rpm: float | None = None
    configured_tpm: float | None = None
    announced_rpm: float | None = None
    announced_tpm: float | None = None
    estimated_rps: float | None = None  #: after 429s that announced no limit
    estimated_at: float = 0.0  #: the last 429 that set the estimate

    def requests_per_s(self, now: float) -> float | None:
        """The tightest request rate known, per second (whole provider, every process)."""
        rates = [r / 60.0 for r in (self.configured_rpm, self.announced_rpm) if r]
        if self.estimated_rps is not None and now - self.estimated_at < ESTIMATE_FORGOTTEN:
            rates.append(self.estimated_rps)
        return min(rates) if rates else None

    def tokens_per_s(self) -> float | None:
        """The tightest token rate known, per second."""
        rates = [t / 60.0 for t in (self.configured_tpm, self.announced_tpm) if t]
        return min(rates) if rates else None


class Pace:
    """This process's pacing of one provider: its slice of the known limits."""

    def __init__(self, name: str, limits: ProviderLimits | None, now: float) -> None:
        self.name = name
        self.known = Known(
            configured_rpm=limits.requests_per_minute if limits else None,
            configured_tpm=limits.tokens_per_minute if limits else None,
        )
        self.max_concurrency = limits.max_concurrency if limits else None
        self.share = 1.0  #: this process's slice (1 / processes pacing the provider)
        self.paused_until = 0.0  #: wall time before which nothing is sent
        self.pause_reason: str | None = None
        self.in_flight = 0
        self.requests: Bucket | None = None
        self.tokens: Bucket | None = None
        self._answered: collections.deque[float] = collections.deque()
        self.retune(now)

    # -- what is known -----------------------------------------------------------------

    @property
    def limited(self) -> bool:
        """Say whether a limit is known (only then is anything counted per call)."""
        return self.requests is not None or self.tokens is not None or bool(self.max_concurrency)

    @property
    def concurrency_slice(self) -> int:
        """Calls this process may have in flight at once (0: no limit known)."""
        if not self.max_concurrency:
            return 0
        return max(1, int(self.max_concurrency * self.share))

    @property
    def counts_tokens(self) -> bool:
        """Say whether a call's tokens must be estimated (a token limit is known)."""
        return self.tokens is not None

    def retune(self, now: float) -> None:
        """Size the buckets to this process's slice of what is known now."""
        rps = self.known.requests_per_s(now)
        if rps is None:
            self.requests = None
        else:
            rate = rps * self.share
            if self.requests is None:
                self.requests = Bucket(rate, 1.0, now)
            else:
                self.requests.retune(rate, 1.0, now)
        tps = self.known.tokens_per_s()
        if tps is None:
            self.tokens = None
        else:
            rate = tps * self.share
            burst = max(rate, 1.0)  # a second's worth: one call may cost many tokens
            if self.tokens is None:
                self.tokens = Bucket(rate, burst, now)
            else:
                self.tokens.retune(rate, burst, now)

    def set_share(self, members: int, now: float) -> None:
        """This process is one of ``members`` pacing the provider."""
        share = 1.0 / max(1, members)
        if share != self.share:
            self.share = share
            self.retune(now)

    def announced(self, limits: RateLimits, now: float) -> bool:
        """Learn the limits a provider announced; say whether they changed."""
        return self.learn(limits.requests_limit, limits.tokens_limit, now)

    def learn(self, rpm: int | None, tpm: int | None, now: float) -> bool:
        """Take announced limits (per minute; None or 0: not said), from the provider or
        from another process; retune and say so when they changed."""
        changed = False
        if rpm and rpm != self.known.announced_rpm:
            self.known.announced_rpm = float(rpm)
            changed = True
        if tpm and tpm != self.known.announced_tpm:
            self.known.announced_tpm = float(tpm)
            changed = True
        if changed:
            self.retune(now)
        return changed

    # -- a call ------------------------------------------------------------------------

    def wait(self, tokens: int, now: float) -> tuple[float, str]:
        """Seconds before a call costing ``tokens`` may go, and why (0: now)."""
        if self.paused_until > now:
            return self.paused_until - now, self.pause_reason or "paused"
        slice_ = self.concurrency_slice
        if slice_ and self.in_flight >= slice_:
            return CONCURRENCY_LOOK, "concurrency"
        wait, why = 0.0, "paced"
        if self.requests is not None:
            wait = self.requests.wait(1.0, now)
        if self.tokens is not None and tokens:
            wait = max(wait, self.tokens.wait(float(tokens), now))
        return wait, why

    def take(self, tokens: int, now: float) -> None:
        """A call goes now: spend its share of the buckets, count it in flight."""
        if self.requests is not None:
            self.requests.take(1.0, now)
        if self.tokens is not None and tokens:
            self.tokens.take(float(tokens), now)
        self.in_flight += 1

    def release(self) -> None:
        """A call that ``take`` counted is over."""
        self.in_flight = max(0, self.in_flight - 1)

    def answered(self, now: float) -> None:
        """A call was answered: remember when (a first 429 halves the rate it measures),
        and an estimated limit grows a little."""
        answered = self._answered
        answered.append(now)
        while answered[0] < now - RATE_WINDOW:
            answered.popleft()
        if self.known.estimated_rps is not None:
            self.known.estimated_rps *= ESTIMATE_GROWTH
            if self.requests is not None:
                self.requests.retune(self.known.estimated_rps * self.share, 1.0, now)

    def pause(self, until: float, reason: str) -> bool:
        """Hold every call until ``until`` (a longer pause in force stays); say whether it
        lengthened the one in force."""
        if until <= self.paused_until:
            return False
        self.paused_until, self.pause_reason = until, reason
        return True

    def refused_unannounced(self, now: float) -> None:
        """A 429 from a provider that announced no limit: halve the rate it took."""
        seen = [t for t in self._answered if t >= now - RATE_WINDOW]
        # Over the time the answers span (a second at least): at a start, ten answers in
        # a tenth of a second say 10 a second, not one a second over the window.
        observed = len(seen) / max(1.0, now - seen[0]) if seen else None
        rates = [r for r in (observed, self.known.requests_per_s(now)) if r is not None]
        self.known.estimated_rps = max(MIN_ESTIMATE, min(rates, default=1.0) * 0.5)
        self.known.estimated_at = now
        self.retune(now)
