"""What this process knows of its database: up, or away since when, and what it cost.

Every part of the process that meets an unavailable database (a request answered 503, a
runner's claim, the reaper, a lease renewal, the LISTEN relay) reports it here instead of
logging a traceback of its own: during a 13 s failover two gateways used to log about 270
``ERROR`` lines, each with a traceback. Here an outage is two WARNING lines: one when the
first failure is seen, one when the database answers again, with how long it was away
and what failed meanwhile, counted by where. While it is away a probe asks it every
``PROBE_INTERVAL`` (bounded by ``PROBE_TIMEOUT``), so the second line comes when the
database is back, not when the next request happens to arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable

log = logging.getLogger("onejob.database")

PROBE_INTERVAL = 0.5  # seconds between the probes of a database that is away
PROBE_TIMEOUT = 1.0  # seconds one probe may take


class DatabaseHealth:
    """Track whether the database answers; log each change once, with counts."""

    def __init__(self, probe: Callable[[float], Awaitable[None]]) -> None:
        self._probe = probe
        self.away_since: float | None = None  #: monotonic time of the first failure
        self.failures: Counter[str] = Counter()  #: this outage's failures, by where
        self.outages = 0  #: outages seen since the process started
        self._watch: asyncio.Task[None] | None = None

    @property
    def up(self) -> bool:
        """Say whether the database answered last time anyone asked."""
        return self.away_since is None

    def failed(self, where: str, exc: BaseException) -> None:
        """Count a failure of an unavailable database at ``where``; log the first one."""
        self.failures[where] += 1
        if self.away_since is not None:
            return
        self.away_since = time.monotonic()
        self.outages += 1
        log.warning(
            "database unavailable: %s at %s; requests get 503 until it answers again",
            type(exc).__name__,
            where,
            extra={"database": "away", "error": type(exc).__name__, "where": where},
        )
        with contextlib.suppress(RuntimeError):  # no running loop: nobody left to tell
            self._watch = asyncio.get_running_loop().create_task(self._wait_until_back())

    def answered(self) -> None:
        """Say the database answered: log the end of an outage if one was going on."""
        if self.away_since is None:
            return
        seconds = time.monotonic() - self.away_since
        failures, self.failures = dict(self.failures), Counter()
        self.away_since = None
        log.warning(
            "database answers again after %.1f s; %d failures meanwhile",
            seconds,
            sum(failures.values()),
            extra={"database": "back", "away_s": round(seconds, 3), "failures": failures},
        )

    async def _wait_until_back(self) -> None:
        while self.away_since is not None:
            try:
                await self._probe(PROBE_TIMEOUT)
            except Exception:  # still away: the probe's error says nothing new
                await asyncio.sleep(PROBE_INTERVAL)
                continue
            self.answered()

    async def close(self) -> None:
        """Stop probing."""
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watch
            self._watch = None
