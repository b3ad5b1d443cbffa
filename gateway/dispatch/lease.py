"""An attempt's lease, renewed while its call is in flight and until its outcome is committed.

The lease says this worker still runs the attempt. A reaper in any process turns an
attempt whose lease expired into ``unknown`` (``reaper``), so a runner keeps renewing it
until its decision is written: under load the deciding transaction may itself wait for a
connection.
"""

from __future__ import annotations

import asyncio

from gateway.dispatch.log_context import log
from gateway.domain.ports import JobStore
from gateway.domain.records import AttemptRecord

#: The dispatcher's log lines share one logger, whichever module writes them.


class LeaseRenewal:
    """Renew an attempt's lease every third of its TTL until ``stop``.

    A timer, not a task waiting on an event: most calls end before the first renewal is
    due, and then this costs one timer handle instead of two tasks per attempt. A renewal
    in flight when the outcome is committed is awaited by ``stop``; one that finds the
    lease lost stops renewing (the attempt's answer is then dropped as stale).

    A lease found gone once the call has returned (``call_returned``) is the normal path:
    the outcome was written meanwhile (an ``unknown`` after a timeout clears the lease),
    or, if the reaper took it, the decision's own line says the answer was dropped. Only a
    lease lost while the call is still out is a WARNING.
    """

    def __init__(
        self, store: JobStore, worker_id: str, lease_ttl: float, attempt: AttemptRecord
    ) -> None:
        self._store = store
        self._worker_id = worker_id
        self._lease_ttl = lease_ttl  # seconds
        self._attempt = attempt
        self._every = lease_ttl / 3  # seconds
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._returned = False
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(self._every, self._due)

    def _due(self) -> None:
        self._timer = None
        self._task = self._loop.create_task(self._renew())

    async def _renew(self) -> None:
        attempt, store = self._attempt, self._store
        try:
            held = await store.renew_lease(attempt.id, self._worker_id, lease_ttl=self._lease_ttl)
        except Exception as exc:
            if not store.unavailable(exc, "lease renewal"):
                log.exception("lease renewal failed")
            held = True  # try again at the next turn
        if not held:
            if self._returned:
                log.debug("lease released: the attempt's outcome is written")
            else:
                log.warning("lease lost while the call is in flight")
            return
        if not self._stopped:
            self._timer = self._loop.call_later(self._every, self._due)

    def call_returned(self) -> None:
        """The provider call is over; its outcome is being written."""
        self._returned = True

    async def stop(self) -> None:
        """Renew no more; wait for a renewal in flight."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
