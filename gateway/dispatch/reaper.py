"""The reaper: running attempts whose lease expired become ``unknown``, never run again;
jobs whose deadline passed while they waited end ``failed`` (``job_deadline``).

Each process runs it every ``reap_interval``. A worker killed mid-call may have reached
the provider, so its attempt is not failed and not re-sent (R3): it waits for a person or
a reconciler. The same loop gives back claims that were never sent (``release_unsent``)
and refreshes the ``onejob_attempts_unknown`` gauge.
"""

from __future__ import annotations

from gateway.dispatch.log_context import log
from gateway.dispatch.state import DispatcherState
from gateway.domain.records import AttemptRecord
from gateway.domain.states import AttemptState
from gateway.metrics import AttemptOutcome

#: The dispatcher's log lines share one logger, whichever module writes them.


class Reaping(DispatcherState):
    """Reap expired leases periodically, or once on demand."""

    async def _reaper_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.store.release_unsent()
                await self.reap_once()
                await self.expire_once()
                await self.metrics.refresh(self.store)
                self.metrics.capacity.show(self.capacity.states())
            except Exception as exc:
                if not self.store.unavailable(exc, "reaper"):
                    log.exception("reaper failed", extra={"worker_id": self.worker_id})
            await self._rest(self.config.reap_interval)

    async def expire_once(self) -> list[str]:
        """Fail the jobs whose deadline passed while an attempt was still unsent; return
        those attempts' ids (``job_deadline``: nothing is sent for them after it)."""
        expired = await self.store.expire_overdue()
        for _ in expired:
            self.metrics.capacity.expired()
        if self.tracing.enabled:
            await self._trace_expired(expired)
        return expired

    async def _trace_expired(self, attempt_ids: list[str]) -> None:
        """Emit the span of each job its deadline failed (this process decided it)."""
        for attempt_id in attempt_ids:
            attempt = await self.store.get_attempt(attempt_id)
            job = await self.store.get_job(attempt.job_id) if attempt is not None else None
            if job is not None:
                self.tracing.job_settled(job, decided_by="job_deadline")

    async def reap_once(self) -> list[AttemptRecord]:
        """Turn running attempts whose lease expired into ``unknown``; return them."""
        reaped = await self.store.reap_expired_leases()
        for attempt in reaped:
            self.metrics.attempt_finished(attempt.provider, AttemptOutcome.UNKNOWN)
            log.warning(
                "lease expired; attempt outcome unknown",
                extra={
                    "job_id": attempt.job_id,
                    "attempt_id": attempt.id,
                    "provider": attempt.provider,
                    "lease_owner": attempt.lease_owner,
                    "state": AttemptState.UNKNOWN.value,
                },
            )
        return reaped
