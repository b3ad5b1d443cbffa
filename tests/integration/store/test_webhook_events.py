"""Which changes a subscription hears of (issue 45), on SQLite and PostgreSQL, made
through the store's own paths: a result (the compare-and-swap, or an operator's resolution
of an unknown attempt) is ``job.succeeded``, a failure with nothing left ``job.failed``, a
cancel ``job.cancelled``, an attempt that became unknown ``attempt.unknown``; nothing else
(creations, failovers, replays) is heard of."""

from __future__ import annotations

import datetime as dt
from typing import Any

from gateway.domain.states import AttemptState
from gateway.domain.webhooks import EVENT_TYPES
from gateway.store import SqlJobStore
from tests.integration.store_helpers import CLAIM


async def claimed(store: SqlJobStore, make_job: Any, key: str) -> tuple[str, str]:
    created = await store.create_or_get(make_job(key=key), CLAIM)
    assert created.claimed is not None
    return created.job.id, created.claimed.attempt.id


async def test_each_end_of_a_job_and_an_unknown_attempt_is_one_event_of_its_type(
    store: SqlJobStore, make_job: Any
) -> None:
    hook = await store.create_webhook("ops", "http://127.0.0.1:9/h", EVENT_TYPES, all_owners=True)
    won, attempt = await claimed(store, make_job, "won")
    await store.finalize(attempt, {"category": "billing"})
    failed, attempt = await claimed(store, make_job, "failed")
    await store.fail_attempt(attempt, {"reason": "status_400"})
    cancelled = (await store.create_or_get(make_job(key="cancelled"))).job.id
    await store.cancel(cancelled)
    unknown, attempt = await claimed(store, make_job, "unknown")
    await store.mark_unknown(attempt, {"reason": "timeout"})
    await store.resolve(attempt, AttemptState.SUCCEEDED, result={"category": "billing"})
    await store.create_or_get(make_job(key="won"))  # a replay: heard of by no one
    await store.create_or_get(make_job(key="still-queued"))

    [batch] = await store.webhook_events([hook], settle_before=dt.datetime.now(dt.UTC))
    assert [(kind, job) for _id, kind, job, _at in batch.events] == [
        ("job.succeeded", won),
        ("job.failed", failed),
        ("job.cancelled", cancelled),
        ("attempt.unknown", unknown),
        ("job.succeeded", unknown),
    ]
