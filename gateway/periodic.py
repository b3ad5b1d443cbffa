"""A background loop that does one thing now and then every ``interval`` seconds.

The loops beside a dispatcher that only look and write once per interval (the capacity
sharing, the queue count) are this: ``start`` runs one ``tick`` at once (a process starts
knowing what it needs) and loops; ``stop`` ends the loop, then runs ``stopped`` (a last
word, e.g. giving back what the process held). A tick that raises is the subclass's to
catch: the loop itself never dies of one.
"""

from __future__ import annotations

import asyncio
import contextlib


class Periodic:
    """``tick`` now, then every ``interval`` seconds until ``stop`` (a ``BackgroundService``)."""

    #: The loop task's name (as ``asyncio`` shows it).
    task_name = "onejob-periodic"

    def __init__(self, interval: float) -> None:
        self.interval = interval  # seconds
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def tick(self) -> None:
        """Do the loop's one thing."""
        raise NotImplementedError

    async def stopped(self) -> None:
        """What to do once the loop has ended (nothing by default)."""

    async def start(self) -> None:
        """Tick once now, then every ``interval``."""
        self._stop.clear()
        await self.tick()
        self._task = asyncio.create_task(self._loop(), name=self.task_name)

    async def stop(self) -> None:
        """End the loop, then ``stopped``."""
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        await self.stopped()

    async def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval)
            if not self._stop.is_set():
                await self.tick()
