"""The attempt dispatcher: claim ``starting`` attempts, call providers, decide (DESIGN R3-R7).

Each of N runners loops: claim the oldest ``starting`` attempt (atomic in the store), call its
provider with the downstream key ``<job id>/<attempt number>`` while renewing the lease, then

- a contract-valid answer goes through the compare-and-swap (won, or lost and dropped);
- a definite failure, or an answer that breaks the output contract, fails the attempt and
  names the next *effective* fallback (configured and certified), up to ``max_attempts``;
- a timeout, broken connection or ambiguous status makes the attempt ``unknown``: nothing
  automatic follows, a person or a reconciler must resolve it.

A reaper turns attempts whose lease expired (their worker died) into ``unknown``. An idle
runner sleeps until the hub says an attempt was created, or ``poll_interval`` passes.
"""

from __future__ import annotations

import asyncio

from gateway.dispatch.first_attempts import FirstAttempts
from gateway.dispatch.log_context import log
from gateway.dispatch.reaper import Reaping
from gateway.dispatch.runners import RunnerLoops

__all__ = ["Dispatcher"]

#: The dispatcher's log lines share one logger, whichever module writes them.


class Dispatcher(RunnerLoops, FirstAttempts, Reaping):
    """Run attempts with N concurrent runners and a lease reaper.

    Built from the store, the hub, the providers and their configurations, the catalog,
    the certifications, the settings and the metrics (``DispatcherState``). Its parts:
    the runner loops (``runners``), the in-process first attempts (``first_attempts``:
    ``reserve``, ``run_claimed``, ``release``), the reaper (``reaper``: ``reap_once``),
    and one attempt's life (``attempt``), which every one of them runs attempts on.
    """

    async def start(self) -> None:
        """Start the runners and the reaper."""
        if self._runners:
            return
        self._stopping.clear()
        self._maybe_queued = True
        self._runners = [
            asyncio.create_task(self._runner_loop(i), name=f"onejob-runner-{i}")
            for i in range(self.config.runners)
        ]
        self._reaper = asyncio.create_task(self._reaper_loop(), name="onejob-reaper")
        log.info(
            "dispatcher started",
            extra={"worker_id": self.worker_id, "runners": self.config.runners},
        )

    async def stop(self) -> None:
        """Stop claiming; let calls in flight finish up to ``shutdown_grace``, then cancel."""
        self._stopping.set()
        self.hub.publish_attempt()  # wake idle runners so they notice
        tasks = [*self._runners, *self._local, *([self._reaper] if self._reaper else [])]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=self.config.shutdown_grace)
        for task in pending:
            task.cancel()
        if pending:
            # Their leases expire and a reaper (here on restart, or in another process)
            # turns those attempts into `unknown`: a cancelled call may still have landed.
            log.warning(
                "dispatcher stopped with calls in flight",
                extra={"worker_id": self.worker_id, "abandoned": self._attempts.in_flight},
            )
            await asyncio.gather(*pending, return_exceptions=True)
        self._runners = []
        self._reaper = None
        log.info("dispatcher stopped", extra={"worker_id": self.worker_id})

    @property
    def in_flight(self) -> int:
        """Count the attempts this dispatcher is running now."""
        return self._attempts.in_flight

    def effective_fallbacks(self, contract_name: str, primary: str) -> list[str]:
        """Return the configured fallbacks the registry certifies for this primary, in order."""
        return self.routes.effective_fallbacks(contract_name, primary)

    async def run_once(self) -> bool:
        """Claim one attempt and run it to its outcome; say whether there was one."""
        claimed, began = await self._claim()
        if claimed is None:
            return False
        await self._attempts.execute(claimed, began)
        return True
