"""The sharing loop: what this process knows of its providers' capacity, and the others'.

Once per ``[capacity] sync_interval`` a process sends what it learned since its last look
(a pause a provider asked for, a circuit that opened or closed, the limits a provider
announced: ``Capacity.take_news``), renews its slice of each provider it paces, and takes
back what every process knows (``Capacity.shared``). One short transaction a look, none on
a call; a process that cannot reach the database goes on with what it knows and tells
the rest at its next look.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging

from gateway.capacity.gate import Capacity
from gateway.domain.ports import JobStore
from gateway.periodic import Periodic

log = logging.getLogger("gateway.capacity")

#: A process's slice lasts this many looks without renewal (it died, or lost the database).
MEMBERSHIP_LOOKS = 3


class CapacitySync(Periodic):
    """Run the sharing loop beside a dispatcher (a ``BackgroundService``)."""

    task_name = "onejob-capacity-sync"

    def __init__(
        self,
        capacity: Capacity,
        store: JobStore,
        instance_id: str,
        *,
        interval: float,
    ) -> None:
        super().__init__(interval)
        self.capacity = capacity
        self.store = store
        self.instance_id = instance_id

    async def tick(self) -> None:
        """One look (the first when the process starts knowing what the others know)."""
        await self.look()

    async def stopped(self) -> None:
        """Give back this process's slices (a last look with none)."""
        with contextlib.suppress(Exception):
            await self.look(leaving=True)

    async def look(self, *, leaving: bool = False) -> None:
        """Send the news, renew the slices, take what every process knows."""
        news = self.capacity.take_news()
        members = [] if leaving else self.capacity.members()
        until = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=self.interval * MEMBERSHIP_LOOKS)
        try:
            rows = await self.store.share_capacity(self.instance_id, members, until, news)
        except Exception as exc:
            # Told again at the next look; a pause or a circuit is never lost here.
            self.capacity.requeue(news)
            if not self.store.unavailable(exc, "capacity sharing"):
                log.exception("capacity sharing failed")
            return
        if not leaving:
            self.capacity.shared(rows)
