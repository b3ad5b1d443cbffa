"""What every part of a dispatcher shares: what it is built from, its runner slots, its
stop flag, and the executor its attempts run on.

``Dispatcher`` (``dispatcher``) is this state with its parts mixed in: the runner loops
(``runners``), the in-process first attempts (``first_attempts``) and the reaper
(``reaper``); each part is a class over this one, as the store's use cases are over its
database.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

from gateway.capacity.gate import Capacity
from gateway.dispatch.attempt import AttemptExecutor
from gateway.dispatch.routing import Routes
from gateway.domain.clock import SystemClock
from gateway.domain.ports import Clock, ContractSpec, JobStore, Provider
from gateway.domain.records import JobRecord
from gateway.metrics import Metrics
from gateway.notify import ChangeHub
from gateway.settings import Settings
from gateway.tracing import NO_TRACING, Tracing
from providers.config import ProviderConfig

DEFAULT_DEADLINE = 30.0  # seconds, for a provider without configuration (never called)


class DispatcherState:
    """Hold a dispatcher's dependencies, slots and stop flag (its parts share them)."""

    def __init__(
        self,
        *,
        store: JobStore,
        hub: ChangeHub,
        providers: Mapping[str, Provider],
        provider_configs: Mapping[str, ProviderConfig],
        catalog: Mapping[str, ContractSpec],
        routes: Routes,
        settings: Settings,
        metrics: Metrics,
        clock: Clock | None = None,
        worker_id: str,
        capacity: Capacity | None = None,
        tracing: Tracing = NO_TRACING,
    ) -> None:
        self.store = store
        self.hub = hub
        self.providers = providers
        self.provider_configs = provider_configs
        self.catalog = catalog
        self.settings = settings
        self.config = settings.dispatcher
        self.metrics = metrics
        self.clock: Clock = clock or SystemClock()
        self.worker_id = worker_id
        #: Spans (``gateway.tracing``): the null one unless ``[telemetry]`` enables them.
        self.tracing = tracing
        #: What this process knows of its providers' capacity (pacing, pauses, circuits).
        self.capacity = capacity or Capacity(provider_configs, settings.capacity)
        self._stopping = asyncio.Event()
        self._runners: list[asyncio.Task[None]] = []
        self._reaper: asyncio.Task[None] | None = None
        self._claim_baton = asyncio.Lock()
        #: One slot per runner: taken by a claimed attempt, from the store's queue or
        #: claimed in-process at creation (``reserve``), until its outcome is committed.
        self._slots = asyncio.Semaphore(self.config.runners)
        #: Whether an attempt may be queued (shared by the runners, who pass the baton):
        #: true at start, after a wake-up and after a claim that found one.
        self._maybe_queued = True
        self._skipped_looks = 0  # polls in a row that found every slot busy and passed
        #: Providers the last claim held back (``Capacity.held``), with their waits.
        self._held: dict[str, float] = {}
        self._local: set[asyncio.Task[JobRecord | None]] = set()
        #: Failover and hedge routing, built once by the composition root.
        self.routes = routes
        self._attempts = AttemptExecutor(
            store=store,
            providers=providers,
            provider_configs=provider_configs,
            catalog=catalog,
            routes=self.routes,
            settings=settings,
            metrics=metrics,
            clock=self.clock,
            worker_id=worker_id,
            stopping=self._stopping,
            capacity=self.capacity,
            hub=hub,
            tracing=tracing,
        )

    async def _rest(self, seconds: float) -> None:
        """Sleep ``seconds``, or less when the dispatcher stops meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
