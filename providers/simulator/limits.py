"""Rate limits and outages the simulator plays, per simulated provider.

``POST /_sim/limits`` gives a provider a token bucket (``requests_per_second``, ``burst``;
it starts full): a call that finds no token is answered the API's 429, with the headers
the real API sends, without being run. ``POST /_sim/outage`` makes every call to a
provider answer the API's overload (503, or 529 for Anthropic) for some seconds. Both run
on a monotonic clock (injected, for tests), and ``/_sim/reset`` forgets them. What the
answers look like is each wire's (``SimWire.rate_limited``, ``overloaded``,
``limit_headers``); this module only keeps the state and decides.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, TypeGuard

from providers.sim_wire import LimitWindow

MAX_RATE = 1_000_000.0  # requests per second a bucket may refill at
MAX_BURST = 1_000_000  # requests a bucket may hold
MAX_OUTAGE = 86_400.0  # seconds an outage may last
EPSILON = 1e-9  # tokens: what float sums of elapsed time may lose


@dataclasses.dataclass(slots=True)
class TokenBucket:
    """One provider's request bucket: ``burst`` tokens, refilled at ``rate`` per second."""

    rate: float  # requests per second
    burst: int
    tokens: float
    stamp: float  # monotonic seconds when ``tokens`` was counted

    def _refill(self, now: float) -> None:
        if now > self.stamp:
            self.tokens = min(float(self.burst), self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now

    def take(self, now: float) -> bool:
        """Take a token if there is one; say whether there was."""
        self._refill(now)
        if self.tokens >= 1 - EPSILON:  # a client that waited exactly as told is let in
            self.tokens = max(0.0, self.tokens - 1)
            return True
        return False

    def window(self, now: float, wall: float) -> LimitWindow:
        """Say where the bucket stands, as the rate-limit headers do (``wall``: Unix time)."""
        self._refill(now)
        return LimitWindow(
            requests_per_minute=max(1, round(self.rate * 60)),
            remaining=math.floor(self.tokens + EPSILON),
            reset_s=(self.burst - self.tokens) / self.rate,
            retry_after_s=max(0.0, (1 - self.tokens) / self.rate),
            now=wall,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Outage:
    """Every call to a provider answers an overload until ``until`` (monotonic seconds)."""

    until: float
    code: int | None  #: the status; None: the API's usual overload status
    retry_after: float | None  #: seconds to ask for (``Retry-After``, Gemini's RetryInfo)


class Throttles:
    """The buckets and outages of every simulated provider."""

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self._monotonic = monotonic
        self._buckets: dict[str, TokenBucket] = {}
        self._outages: dict[str, Outage] = {}

    def clear(self) -> None:
        """Forget every limit and outage."""
        self._buckets.clear()
        self._outages.clear()

    def outage(self, provider: str) -> Outage | None:
        """Return the outage ``provider`` is in now, if any."""
        outage = self._outages.get(provider)
        if outage is not None and self._monotonic() >= outage.until:
            del self._outages[provider]
            return None
        return outage

    def admit(self, provider: str, wall: float) -> tuple[bool, LimitWindow | None]:
        """Take a token for one call: ``(admitted, where the bucket stands after)``.

        A provider without a limit is always admitted, with no window to announce.
        """
        bucket = self._buckets.get(provider)
        if bucket is None:
            return True, None
        now = self._monotonic()
        admitted = bucket.take(now)
        return admitted, bucket.window(now, wall)

    # -- the control API -------------------------------------------------------------------

    def set_limit(self, data: dict[str, Any]) -> dict[str, Any]:
        """``POST /_sim/limits``: give a provider a bucket, or remove it (rps null)."""
        provider = _provider(data)
        if unknown := set(data) - {"provider", "requests_per_second", "burst"}:
            raise ValueError(f"unknown fields: {sorted(unknown)}")
        rate = data.get("requests_per_second")
        if rate is None:
            self._buckets.pop(provider, None)
            return self.limits_json()
        if not _number(rate) or not 0 < rate <= MAX_RATE:
            raise ValueError(f"'requests_per_second' must be a number in (0, {MAX_RATE:g}]")
        burst = data.get("burst", max(1, math.floor(rate)))
        if not isinstance(burst, int) or isinstance(burst, bool) or not 1 <= burst <= MAX_BURST:
            raise ValueError(f"'burst' must be a whole number of requests, 1 to {MAX_BURST}")
        now = self._monotonic()
        self._buckets[provider] = TokenBucket(float(rate), burst, float(burst), now)
        return self.limits_json()

    def limits_json(self) -> dict[str, Any]:
        """``GET /_sim/limits``: every bucket and where it stands."""
        now = self._monotonic()
        listed = {}
        for name, bucket in sorted(self._buckets.items()):
            window = bucket.window(now, 0.0)
            listed[name] = {
                "requests_per_second": bucket.rate,
                "burst": bucket.burst,
                "remaining": window.remaining,
                "reset_s": round(window.reset_s, 3),
            }
        return {"limits": listed}

    def set_outage(self, data: dict[str, Any]) -> dict[str, Any]:
        """``POST /_sim/outage``: overload a provider for ``seconds`` from now (0: end it)."""
        provider = _provider(data)
        if unknown := set(data) - {"provider", "seconds", "code", "retry_after"}:
            raise ValueError(f"unknown fields: {sorted(unknown)}")
        seconds = data.get("seconds")
        if not _number(seconds) or not 0 <= seconds <= MAX_OUTAGE:
            raise ValueError(f"'seconds' must be a number from 0 to {MAX_OUTAGE:g}")
        code = data.get("code")
        if code is not None and (
            not isinstance(code, int)
            or isinstance(code, bool)
            or not (code == 429 or 500 <= code <= 599)
        ):
            raise ValueError("'code' must be 429, a status from 500 to 599, or null")
        retry_after = data.get("retry_after")
        if retry_after is not None and (not _number(retry_after) or retry_after < 0):
            raise ValueError("'retry_after' must be a non-negative number of seconds or null")
        if seconds == 0:
            self._outages.pop(provider, None)
        else:
            until = self._monotonic() + seconds
            wait = None if retry_after is None else float(retry_after)
            self._outages[provider] = Outage(until, code, wait)
        return self.outages_json()

    def outages_json(self) -> dict[str, Any]:
        """``GET /_sim/outage``: every outage still running, and for how long."""
        now = self._monotonic()
        return {
            "outages": {
                name: {
                    "seconds_left": round(outage.until - now, 3),
                    "code": outage.code,
                    "retry_after": outage.retry_after,
                }
                for name, outage in sorted(self._outages.items())
                if outage.until > now
            }
        }


def _provider(data: dict[str, Any]) -> str:
    provider = data.get("provider")
    if not isinstance(provider, str) or not provider:
        raise ValueError("'provider' must name a simulated provider")
    return provider


def _number(value: Any) -> TypeGuard[float]:
    """Say whether ``value`` is a finite JSON number (``true`` is not one)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
