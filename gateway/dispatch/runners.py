"""The runner loops: N per process, taking turns with one claim baton to claim queued attempts.

One idle runner per process at a time holds the claim baton: it claims, or sleeps on the
hub until an attempt is created (or ``poll_interval`` passes). When it claims one it
passes the baton on and runs it, and the next idle runner claims at once in case more
work is queued. A wake-up thus costs one claim transaction per process, not one per idle
runner (a thundering herd that serializes on SQLite's write lock).
"""

from __future__ import annotations

import time

from gateway.dispatch.log_context import log
from gateway.dispatch.state import DEFAULT_DEADLINE, DispatcherState
from gateway.domain.records import ClaimedAttempt

#: The dispatcher's log lines share one logger, whichever module writes them.

ERROR_PAUSE = 0.5  # seconds a runner rests after an unexpected store error
#: Polls in a row that may pass while every slot is busy before one waits for a slot.
MAX_SKIPPED_LOOKS = 3
#: Seconds past a held provider's wait before the queue is looked at again (its pace
#: has a call's worth again by then, whatever the clocks' resolution).
HELD_SLACK = 0.002


class RunnerLoops(DispatcherState):
    """Claim queued attempts and run them, one runner slot each."""

    async def _runner_loop(self, index: int) -> None:
        # A wake-up means an attempt was queued: the runner waits for a slot, and gets the
        # next one freed before a new job's in-process first attempt (queued work first).
        # A periodic look (the poll interval passed with no wake-up) only looks when a
        # slot is free: waiting for one would take it from the next new job only to find
        # nothing queued, and send that job through the queue instead (measured at 16
        # connections on 16 runners: a claim transaction for a share of all jobs). After
        # MAX_SKIPPED_LOOKS such polls in a row it waits for a slot anyway, so an attempt
        # whose wake-up was lost is claimed within a few poll intervals under any load.
        while not self._stopping.is_set():
            try:
                async with self._claim_baton:
                    if self._stopping.is_set():
                        return
                    if (
                        not self._maybe_queued
                        and self._slots.locked()
                        and self._skipped_looks < MAX_SKIPPED_LOOKS
                    ):
                        self._skipped_looks += 1
                        self._maybe_queued = await self.hub.wait_attempt(self.config.poll_interval)
                        continue
                    self._skipped_looks = 0
                    await self._slots.acquire()
                    if self._stopping.is_set():  # stopped while waiting: claim nothing
                        self._slots.release()
                        return
                    try:
                        claimed, began = await self._claim()
                    except BaseException:
                        self._slots.release()
                        raise
                    # Found one: the next runner looks again at once. Found none: wait,
                    # and no longer than until a provider held back can take a call.
                    self._maybe_queued = claimed is not None
                    if claimed is None:
                        self._slots.release()
                        look = min([self.config.poll_interval, *self._held.values()])
                        woken = await self.hub.wait_attempt(look + HELD_SLACK)
                        self._maybe_queued = woken or bool(self._held)
                        continue
                try:
                    await self._attempts.execute(claimed, began)
                finally:
                    self._slots.release()
            except Exception as exc:
                if not self.store.unavailable(exc, "runner"):
                    log.exception("runner failed", extra={"worker_id": self.worker_id})
                await self._rest(ERROR_PAUSE)

    async def _claim(self) -> tuple[ClaimedAttempt | None, float]:
        """Claim the first attempt of the queue; return it and when the claim began.

        Not one of a provider held back (``Capacity.held``: paced, or paused for less than
        ``patience``): its attempts wait in line, costing nothing, rather than being
        claimed only to be put back. One held longer, or behind an open circuit, is
        claimed: it fails over, or its wait is written (``Outcomes.not_now``).
        """
        deadlines = {name: cfg.timeout for name, cfg in self.provider_configs.items()}
        self._held = self.capacity.held(self.settings.capacity.patience)
        began = time.perf_counter()  # the claim's transaction is part of the overhead
        claimed = await self.store.claim_next_attempt(
            self.worker_id,
            lease_ttl=self.config.lease_ttl,
            deadline_s=deadlines,
            default_deadline_s=DEFAULT_DEADLINE,
            exclude=list(self._held),
        )
        return claimed, began
