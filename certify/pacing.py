"""The pace of ``--production`` calls: the provider's configured limits and its "not now".

A production sample is up to N calls to one fallback in a burst. They keep to what the
provider's configuration says of the account (``[providers.NAME.limits]``:
``requests_per_minute`` spaces them, ``max_concurrency`` bounds those in flight), and a
rate limit or an overload with a wait the provider names (``Retry-After``) is waited out
and the call sent again, a few times, as a schedule rather than a failure. A hard quota
(``QuotaExhausted``) is not waited for. This is the certification process's own pacing:
``onejob certify`` runs apart from the gateway and does not share its processes' capacity
gate (``gateway.capacity``), so a sample taken while the gateway is busy with the same
provider counts against the same account limits; the provider's 429s then slow it down.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from providers.base import NoCapacity, ProviderRequest, ProviderResult
from providers.config import ProviderConfig

MAX_WAIT = 30.0  # seconds: a longer wait asked by the provider is not waited for
RETRIES = 3  #: times one call is sent again after a "not now"
DEFAULT_WAIT = 1.0  # seconds, when the provider said "not now" without saying how long


class Pacer:
    """Space one provider's production calls and wait out its "not now"."""

    def __init__(
        self,
        provider: ProviderConfig,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        limits = provider.limits
        rpm = limits.requests_per_minute
        self.spacing = 60.0 / rpm if rpm else 0.0  # seconds between two calls
        self._in_flight = asyncio.Semaphore(limits.max_concurrency or 1_000_000)
        self._sleep, self._clock = sleep, clock
        self._next = 0.0  # the clock's time the next call may start
        self._slot = asyncio.Lock()
        self.waited: list[float] = []  #: every wait this pacer made, in seconds

    async def _wait(self, seconds: float) -> None:
        self.waited.append(seconds)
        await self._sleep(seconds)

    @contextlib.asynccontextmanager
    async def _turn(self) -> AsyncIterator[None]:
        async with self._in_flight:
            async with self._slot:
                delay = self._next - self._clock()
                if delay > 0:
                    await self._wait(delay)
                self._next = max(self._next, self._clock()) + self.spacing
            yield

    async def call(self, adapter: Any, request: ProviderRequest) -> ProviderResult:
        """Call ``adapter`` in turn; on a "not now" with a wait up to ``MAX_WAIT``, again."""
        for attempt in range(RETRIES + 1):
            async with self._turn():
                try:
                    result: ProviderResult = await adapter.call(request)
                    return result
                except NoCapacity as exc:
                    wait = DEFAULT_WAIT if exc.retry_after is None else exc.retry_after
                    if attempt == RETRIES or wait > MAX_WAIT:
                        raise
            await self._wait(wait)
        raise AssertionError("unreachable")  # the loop returns or raises
