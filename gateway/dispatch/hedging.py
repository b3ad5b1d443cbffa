"""Hedging (R6): race a slow initial attempt on the first certified fallback.

A hedge starts only when the route sets ``hedge_after_s``, the contract is ``hedgeable``,
``max_attempts >= 2``, a fallback is certified and the attempt is the job's ``initial``
one (``Routes.hedge_target``), and never into a provider that cannot take a call now (its
circuit open, paused, paced out: ``Capacity.blocked``). The store refuses it (R4) while
any attempt is ``starting``, ``waiting`` or ``unknown``, and once the job is decided; both
attempts then race through R5.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

from gateway.capacity.gate import Capacity
from gateway.dispatch.log_context import log
from gateway.dispatch.routing import Routes
from gateway.domain.ports import ContractSpec, JobStore
from gateway.domain.records import AddAttemptOutcome, AttemptRecord, JobRecord
from gateway.domain.states import AttemptReason
from gateway.settings import Settings

#: The dispatcher's log lines share one logger, whichever module writes them.


class Hedging:
    """Add a hedge attempt for a call still in flight after its route's ``hedge_after_s``."""

    def __init__(
        self,
        *,
        store: JobStore,
        settings: Settings,
        routes: Routes,
        catalog: Mapping[str, ContractSpec],
        capacity: Capacity,
        stopping: asyncio.Event,
    ) -> None:
        self.store = store
        self.settings = settings
        self.routes = routes
        self.catalog = catalog
        self.capacity = capacity
        self._stopping = stopping

    async def hedge(self, job: JobRecord, attempt: AttemptRecord, done: asyncio.Event) -> None:
        """After ``hedge_after_s`` with the call still in flight, race it on the first fallback."""
        route = self.settings.route_for(job.contract)
        assert route is not None and route.hedge_after_s is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), route.hedge_after_s)
        if done.is_set() or self._stopping.is_set():
            return
        target = self.routes.hedge_target(job, attempt, self.catalog[job.contract])
        if target is None:
            return  # the certificate was withdrawn while we waited
        if target in self.capacity.blocked():
            # Never into an open circuit, a pause or a spent pace: it would only wait.
            log.info("hedge skipped: its provider cannot take a call now")
            return
        try:
            res = await self.store.add_attempt(
                job.id, target, AttemptReason.HEDGE, allow_running=True
            )
        except Exception:
            log.exception("hedge could not be added")
            return
        if res.outcome is AddAttemptOutcome.ADDED and res.attempt is not None:
            log.info(
                "hedge started",
                extra={"hedge_attempt_id": res.attempt.id, "hedge_provider": target},
            )
        else:
            blocking = res.blocking
            log.info(
                "hedge refused",
                extra={
                    "outcome": res.outcome.value,
                    "blocking_attempt_id": blocking.id if blocking else None,
                    "blocking_state": blocking.state.value if blocking else None,
                },
            )
