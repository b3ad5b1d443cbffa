"""The first attempt runs where the request is (the ``LocalRunner`` seam, R7).

When ``POST /v1/jobs`` creates a job and a runner slot is free, the service ``reserve``s
it, the creating transaction inserts attempt 1 already claimed (leased to this process),
and ``run_claimed`` runs it at once in that slot: no NOTIFY, no wake-up, no claim
transaction before the provider is called. A slot that claimed nothing (a replay, a
conflict, an error) is given back with ``release``. While the creating statement is on
the wire, the job's prompt may be rendered (``attempt.Prompt``, ``prompt_meanwhile``).
"""

from __future__ import annotations

import asyncio
import time

from gateway.dispatch.attempt import Prompt
from gateway.dispatch.log_context import log
from gateway.dispatch.state import DEFAULT_DEADLINE, DispatcherState
from gateway.domain.records import ClaimedAttempt, ClaimSpec, JobRecord, NewJob

#: The dispatcher's log lines share one logger, whichever module writes them.

#: How long a new job waits for a runner slot before it is queued instead (seconds). A
#: queued job costs a claim transaction, and its runner takes the next freed slot ahead
#: of the next new job, which may then be queued too: 5 ms let that cycle run on a slow
#: host (docs/dispatcher.md).
RESERVE_WAIT = 0.1


class FirstAttempts(DispatcherState):
    """Run a new job's first attempt in this process, in a runner slot taken at creation."""

    async def reserve(self, provider: str, job: NewJob | None = None) -> ClaimSpec | None:
        """Take a runner slot for a job about to be created; None when none is free
        within ``RESERVE_WAIT`` (the job is queued for any runner).

        With ``job``, the spec's ``meanwhile`` renders its contract's prompt (``Prompt``),
        which the store runs while the creating statement is on the wire, if the loop has
        nothing else to do then; the attempt, once claimed, uses what it rendered.

        The caller passes the returned spec to ``create_or_get`` and then hands the claimed
        attempt to ``run_claimed``, or gives the slot back with ``release`` when nothing
        was claimed (a replay, a conflict, an error).
        """
        if self._stopping.is_set() or not self._runners:
            return None
        if not self.capacity.free_flowing(provider):
            # A paced, paused or failing provider: the job queues, in its owner's fair
            # place, and a runner claims it when the provider can take it.
            return None
        if self._slots.locked():
            # A slot held by a claim that finds nothing, or by an attempt just deciding,
            # comes back within milliseconds; without this wait, that job and every next
            # one would go through the queue (a claim each) while the slots stay full.
            try:
                async with asyncio.timeout(RESERVE_WAIT):
                    await self._slots.acquire()
            except TimeoutError:
                return None
            if self._stopping.is_set():
                self._slots.release()
                return None
        else:
            await self._slots.acquire()  # a free slot: this does not wait
        cfg = self.provider_configs.get(provider)
        contract = self.catalog.get(job.contract) if job is not None else None
        deadline_s = cfg.timeout if cfg is not None else DEFAULT_DEADLINE
        if job is not None and job.deadline_s is not None:
            deadline_s = min(deadline_s, job.deadline_s)  # never past the job's deadline
        return ClaimSpec(
            worker_id=self.worker_id,
            lease_ttl=self.config.lease_ttl,
            deadline_s=deadline_s,
            meanwhile=(
                Prompt(contract, job.input)
                if job is not None and contract and self.settings.shortcuts.prompt_meanwhile
                else None
            ),
        )

    def release(self) -> None:
        """Give back a slot ``reserve`` took when no attempt was claimed with it."""
        self._slots.release()

    def run_claimed(
        self, claimed: ClaimedAttempt, spec: ClaimSpec | None = None
    ) -> asyncio.Task[JobRecord | None]:
        """Run an attempt claimed at creation in this process, in the slot ``reserve`` took
        (``spec``, what it returned: its prompt, if it was rendered meanwhile).

        Return the task; its result is the job as the deciding transaction left it (None
        when the attempt ended without a decision this process saw, e.g. reaped).
        """
        prompt = spec.meanwhile if spec is not None else None

        async def run() -> JobRecord | None:
            try:
                return await self._attempts.execute(
                    claimed,
                    time.perf_counter(),
                    prompt if isinstance(prompt, Prompt) else None,
                )
            except Exception as exc:
                # As in a runner: the lease expires and the reaper makes it `unknown`.
                if not self.store.unavailable(exc, "in-process attempt"):
                    log.exception("in-process attempt failed", extra={"worker_id": self.worker_id})
                return None
            finally:
                self._slots.release()

        task = asyncio.create_task(run(), name=f"onejob-local-{claimed.attempt.id}")
        self._local.add(task)
        task.add_done_callback(self._local.discard)
        return task
