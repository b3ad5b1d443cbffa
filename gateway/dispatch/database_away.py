"""Writing an attempt's outcome while the database is away (``dispatcher.decision_retry``).

The provider has answered (or definitely failed, or timed out): what it did is in this
process's memory only. ``persist`` tries the deciding write again while the database is
unavailable (a failover, a partition); ``late_answer`` resolves, with its answer, an
attempt the reaper made ``unknown`` while that answer was on the way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from gateway.dispatch.log_context import log
from gateway.domain.ports import JobStore
from gateway.domain.records import (
    AttemptRecord,
    FinalizeOutcome,
    FinalizeResult,
    TransitionOutcome,
)
from gateway.domain.states import AttemptState
from providers.base import ProviderResult

#: The dispatcher's log lines share one logger, whichever module writes them.
_T = TypeVar("_T")

#: Seconds between tries of a decision the database could not take (a failover, a
#: partition), doubling up to ``DECISION_RETRY_MAX``, for ``dispatcher.decision_retry``.
DECISION_RETRY_FIRST = 0.25
DECISION_RETRY_MAX = 2.0


async def persist(
    store: JobStore,
    retry_s: float,
    what: str,
    write: Callable[[], Awaitable[_T]],
    error: Exception,
) -> _T:
    """Try ``write`` again while the database is unavailable, up to ``retry_s`` seconds.

    Without this, a failover or a partition that fails the deciding statement would leave
    the attempt to its lease, and then ``unknown`` for an operator. Each write is guarded
    by the attempt's state, so a try whose commit was lost with its answer is found done
    by the next one; an answer that outlived its lease resolves the attempt the reaper
    made ``unknown`` (``late_answer``). ``error`` is the first try's; anything but an
    unavailable database is raised at once.
    """
    pause = DECISION_RETRY_FIRST
    give_up = time.monotonic() + retry_s
    while True:
        if not store.unavailable(error, what) or time.monotonic() + pause > give_up:
            raise error
        await asyncio.sleep(pause)
        pause = min(pause * 2, DECISION_RETRY_MAX)
        try:
            return await write()
        except Exception as exc:
            error = exc


async def late_answer(
    store: JobStore,
    worker_id: str,
    attempt: AttemptRecord,
    result: ProviderResult,
    fin: FinalizeResult,
) -> FinalizeResult:
    """Decide with an answer that came back after the attempt's lease expired.

    The reaper made the attempt ``unknown`` while its answer was on the way (the
    database was away longer than the lease, say). This process holds the evidence
    a reconciler would look for: the answer itself. So it resolves the attempt with
    it, through the same compare-and-swap (another attempt that won meanwhile still
    wins). An attempt moved any other way keeps its state, and the answer is dropped.
    """
    try:
        res = await store.resolve(
            attempt.id,
            AttemptState.SUCCEEDED,
            result=result.output,
            note="the provider answered after the lease expired",
            evidence={"source": "late_answer", "worker": worker_id},
        )
    except Exception as exc:
        if not store.unavailable(exc, "late answer"):
            raise
        return fin
    if res.outcome is not TransitionOutcome.DONE or res.job is None:
        return fin
    won = res.job.completed_by == attempt.id
    log.warning(
        "late answer resolved its unknown attempt",
        extra={"won": won, "winner": res.job.completed_by},
    )
    return FinalizeResult(
        FinalizeOutcome.WON if won else FinalizeOutcome.LOST,
        attempt.id,
        winner=res.job.completed_by,
        job_status=res.job.status,
        job=res.job,
    )
