"""Claims never used go back to the queue, and only those: a later claim is never undone.

``never_sent`` and a claim whose transaction failed after choosing its attempt both leave
an entry (attempt, worker, the claim's ``started_at``). Releasing it moves the attempt back
to ``starting`` only if that very claim holds it: the same worker's later claim of the same
attempt (after a release, say) has another ``started_at`` and keeps running.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from gateway.domain.records import ClaimSpec
from gateway.domain.states import AttemptState
from gateway.store import SqlJobStore


async def test_an_unused_claim_is_released_with_its_event(
    store: SqlJobStore, make_job: Any
) -> None:
    made = await store.create_or_get(make_job(), ClaimSpec("gw-1", 30.0, 10.0))
    assert made.claimed is not None
    attempt = made.claimed.attempt
    store.never_sent(attempt.id, "gw-1", attempt.started_at)

    assert await store.release_unsent() == [attempt.id]

    job = await store.get_job(made.job.id)
    assert job is not None and job.attempts[0].state is AttemptState.STARTING
    assert [e.kind for e in await store.events(job.id)][-1] == "claim_released"
    assert await store.release_unsent() == []


async def test_a_release_never_undoes_a_later_claim_of_the_same_worker(
    store: SqlJobStore, make_job: Any
) -> None:
    made = await store.create_or_get(make_job(), ClaimSpec("gw-1", 30.0, 10.0))
    assert made.claimed is not None
    attempt = made.claimed.attempt
    assert attempt.started_at is not None
    earlier = attempt.started_at - dt.timedelta(seconds=5)
    store.never_sent(attempt.id, "gw-1", earlier)  # a claim that is not this one

    assert await store.release_unsent() == []

    job = await store.get_job(made.job.id)
    assert job is not None and job.attempts[0].state is AttemptState.RUNNING
    assert not store.unsent.pending  # looked at once, then forgotten


async def test_another_workers_claim_is_never_released(store: SqlJobStore, make_job: Any) -> None:
    made = await store.create_or_get(make_job(), ClaimSpec("gw-1", 30.0, 10.0))
    assert made.claimed is not None
    attempt = made.claimed.attempt
    store.never_sent(attempt.id, "gw-2", attempt.started_at)

    assert await store.release_unsent() == []
    job = await store.get_job(made.job.id)
    assert job is not None and job.attempts[0].state is AttemptState.RUNNING
