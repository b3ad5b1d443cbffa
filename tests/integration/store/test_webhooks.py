"""Webhooks in the store (issue 45), on SQLite and PostgreSQL: subscriptions, the events a
cursor reads off the audit trail (an id committed out of order is not skipped), one
delivery per event, claims, outcomes, rotation, redelivery."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from gateway.domain.clock import ManualClock
from gateway.domain.webhooks import EVENT_TYPES, DeliveryStatus, NewDelivery
from gateway.store import SqlJobStore
from gateway.store.tables import job_events
from gateway.store.webhooks import MAX_GAPS
from tests.integration.store_helpers import clocked_store, deliveries, succeeded

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
SETTLE = dt.timedelta(seconds=120)


async def enqueue_all(
    store: SqlJobStore, webhook_id: str, now: dt.datetime, limit: int = 1000
) -> list[str]:
    """Read a subscription's events as the delivery service does; return their job ids."""
    hook = await store.get_webhook(webhook_id, None)
    assert hook is not None
    [batch] = await store.webhook_events([hook], settle_before=now - SETTLE, limit=limit)
    deliveries = [
        NewDelivery(event_id, kind, job_id, {"type": kind})
        for event_id, kind, job_id, _at in batch.events
    ]
    await store.enqueue_deliveries(batch, deliveries)
    return [job_id for _e, _k, job_id, _a in batch.events]


async def test_a_subscription_hears_its_owners_ends_from_its_creation_once_each(
    database_url: str, make_job: Any
) -> None:
    clock = ManualClock(START)
    async with clocked_store(database_url, clock) as store:
        await succeeded(store, make_job, "before")
        hook = await store.create_webhook(
            "alice", "http://127.0.0.1:9/h", ["job.succeeded"], all_owners=False
        )
        admin = await store.create_webhook(
            "root", "http://127.0.0.1:9/a", EVENT_TYPES, all_owners=True
        )
        assert hook.secret.startswith("whsec_") and hook.secret != admin.secret
        mine = await succeeded(store, make_job, "mine")
        theirs = await succeeded(store, make_job, "theirs", owner="bob")
        cancelled = await store.create_or_get(make_job(key="cancelled"))
        await store.cancel(cancelled.job.id)

        assert await enqueue_all(store, hook.id, clock.now()) == [mine]
        assert await enqueue_all(store, hook.id, clock.now()) == []
        assert sorted(await enqueue_all(store, admin.id, clock.now())) == sorted(
            [mine, theirs, cancelled.job.id]
        )
        listed = await deliveries(store, hook.id, "alice")
        assert [d.job_id for d in listed] == [mine]
        assert listed[0].status is DeliveryStatus.PENDING and listed[0].tries == 0
        assert await store.list_deliveries(hook.id, "bob") is None
        assert [w.id for w in await store.list_webhooks("alice")] == [hook.id]
        assert len(await store.list_webhooks(None)) == 2


async def test_an_event_committed_after_a_larger_id_is_not_skipped(
    database_url: str, make_job: Any
) -> None:
    clock = ManualClock(START)
    async with clocked_store(database_url, clock) as store:
        hook = await store.create_webhook(
            "alice", "http://127.0.0.1:9/h", ["job.failed"], all_owners=False
        )
        slow_job = (await store.create_or_get(make_job(key="slow"))).job.id
        fast_job = (await store.create_or_get(make_job(key="fast"))).job.id
        failed = {
            "kind": "job_failed",
            "detail": {},
            "at": clock.now().replace(tzinfo=None),
            "owner_id": "alice",
        }
        if database_url.startswith("postgresql"):
            # The slow transaction draws its id first and commits after the fast one.
            other = create_async_engine(database_url)
            try:
                async with other.connect() as slow:
                    await slow.execute(job_events.insert().values(job_id=slow_job, **failed))
                    async with store.engine.begin() as fast:
                        await fast.execute(job_events.insert().values(job_id=fast_job, **failed))
                    assert await enqueue_all(store, hook.id, clock.now()) == [fast_job]
                    await slow.commit()
            finally:
                await other.dispose()
        else:
            # SQLite commits in id order; a rolled-back id leaves a gap instead.
            async with store.engine.begin() as conn:
                top = (await conn.execute(sa.select(sa.func.max(job_events.c.id)))).scalar_one()
                await conn.execute(
                    job_events.insert().values(id=top + 2, job_id=fast_job, **failed)
                )
            assert await enqueue_all(store, hook.id, clock.now()) == [fast_job]
            async with store.engine.begin() as conn:
                await conn.execute(
                    job_events.insert().values(id=top + 1, job_id=slow_job, **failed)
                )
        assert await enqueue_all(store, hook.id, clock.now()) == [slow_job]
        assert await enqueue_all(store, hook.id, clock.now()) == []
        clock.advance(SETTLE.total_seconds() + 1)
        await enqueue_all(store, hook.id, clock.now())
        moved = await store.get_webhook(hook.id, None)
        assert moved is not None and moved.cursor == moved.seen > hook.cursor
        assert moved.gaps == ()


async def test_a_gap_holds_the_cursor_until_it_settles_but_not_the_events_after_it(
    store: SqlJobStore, make_job: Any
) -> None:
    jobs = [(await store.create_or_get(make_job(key=f"k{n}"))).job.id for n in range(3)]
    hook = await store.create_webhook(
        "alice", "http://127.0.0.1:9/h", ["job.failed"], all_owners=False
    )
    now = dt.datetime.now(dt.UTC)
    naive = now.replace(tzinfo=None)
    async with store.engine.begin() as conn:
        top = (await conn.execute(sa.select(sa.func.max(job_events.c.id)))).scalar_one()
        for n, job in enumerate(jobs):  # ids top+5, top+6, top+7: top+1 to top+4 missing
            await conn.execute(
                job_events.insert().values(
                    id=top + 5 + n,
                    job_id=job,
                    owner_id="alice",
                    kind="job_failed",
                    detail={},
                    at=naive,
                )
            )
    # One event a pass: each pass reads on past the last one seen, not again past the gap.
    for job in jobs:
        assert await enqueue_all(store, hook.id, now, limit=1) == [job]
    held = await store.get_webhook(hook.id, None)
    assert held is not None and held.cursor == top and held.seen == top + 7
    assert [(lo, hi) for lo, hi, _ in held.gaps] == [(top + 1, top + 4)]
    assert await enqueue_all(store, hook.id, now) == []
    # Settled (noticed longer ago than the settling time): read once more, then let go.
    later = now + SETTLE + dt.timedelta(seconds=1)
    assert await enqueue_all(store, hook.id, later) == []
    moved = await store.get_webhook(hook.id, None)
    assert moved is not None and moved.cursor == moved.seen == top + 7 and moved.gaps == ()


async def test_a_delivery_is_claimed_once_and_its_outcomes_recorded(
    store: SqlJobStore, make_job: Any
) -> None:
    hook = await store.create_webhook(
        "alice", "http://127.0.0.1:9/h", ["job.succeeded"], all_owners=False
    )
    job = await succeeded(store, make_job, "k")
    await enqueue_all(store, hook.id, dt.datetime.now(dt.UTC))
    [(delivery, claimed_hook)] = await store.due_deliveries(lease=60.0)
    assert delivery.job_id == job and claimed_hook.id == hook.id
    assert claimed_hook.secret == hook.secret
    assert await store.due_deliveries(lease=60.0) == []

    await store.record_delivery(
        delivery.id, status=DeliveryStatus.PENDING, answer=500, error=None, next_at=START
    )
    [(again, _)] = await store.due_deliveries(lease=60.0)
    assert again.id == delivery.id and again.tries == 1 and again.last_status == 500
    await store.record_delivery(
        delivery.id,
        status=DeliveryStatus.FAILED,
        answer=410,
        error=None,
        next_at=None,
        disable="gone",
    )
    gone = await store.get_webhook(hook.id, "alice")
    assert gone is not None and gone.disabled_reason == "gone" and gone.disabled_at is not None
    [shown] = await deliveries(store, hook.id, "alice")
    assert shown.status is DeliveryStatus.FAILED and shown.tries == 2

    redone = await store.redeliver(hook.id, delivery.id, "alice")
    assert redone is not None and redone.status is DeliveryStatus.PENDING and redone.tries == 0
    assert await store.due_deliveries(lease=60.0) == []  # its subscription is disabled
    assert await store.redeliver(hook.id, delivery.id, "bob") is None


async def test_rotation_keeps_the_old_secret_for_its_window_and_delete_hides_it(
    store: SqlJobStore,
) -> None:
    hook = await store.create_webhook(
        "alice", "http://127.0.0.1:9/h", ["job.failed"], all_owners=False
    )
    assert await store.rotate_webhook_secret(hook.id, "bob", window=60.0) is None
    rotated = await store.rotate_webhook_secret(hook.id, "alice", window=60.0)
    assert rotated is not None and rotated.previous_secret == hook.secret
    now = dt.datetime.now(dt.UTC)
    assert rotated.secrets_at(now) == (rotated.secret, hook.secret)
    assert rotated.secrets_at(now + dt.timedelta(seconds=61)) == (rotated.secret,)
    test = await store.add_delivery(hook.id, NewDelivery(None, "webhook.test", None, {}))
    assert test.status is DeliveryStatus.PENDING
    assert await store.delete_webhook(hook.id, "bob") is False
    assert await store.delete_webhook(hook.id, "alice") is True
    assert await store.get_webhook(hook.id, "alice") is None
    assert await store.list_webhooks("alice") == []


async def test_retention_deletes_a_pruned_jobs_deliveries_with_it(
    store: SqlJobStore, make_job: Any
) -> None:
    hook = await store.create_webhook(
        "alice", "http://127.0.0.1:9/h", ["job.succeeded"], all_owners=False
    )
    job = await succeeded(store, make_job, "old")
    assert await enqueue_all(store, hook.id, dt.datetime.now(dt.UTC)) == [job]
    test = await store.add_delivery(hook.id, NewDelivery(None, "webhook.test", None, {}))
    assert await store.prune_jobs(dt.datetime.now(dt.UTC) + dt.timedelta(days=1)) == 1
    assert [d.id for d in await deliveries(store, hook.id, "alice")] == [test.id]


async def test_the_enabled_subscriptions_are_chosen_by_the_database(
    store: SqlJobStore, make_job: Any
) -> None:
    kept = await store.create_webhook(
        "alice", "http://127.0.0.1:9/k", ["job.succeeded"], all_owners=False
    )
    gone = await store.create_webhook(
        "alice", "http://127.0.0.1:9/g", ["job.succeeded"], all_owners=False
    )
    test = await store.add_delivery(gone.id, NewDelivery(None, "webhook.test", None, {}))
    await store.record_delivery(
        test.id, status=DeliveryStatus.FAILED, answer=410, error=None, next_at=None, disable="gone"
    )
    assert [h.id for h in await store.list_webhooks(None, enabled_only=True)] == [kept.id]
    assert [h.id for h in await store.list_webhooks("alice", enabled_only=True)] == [kept.id]
    assert [h.id for h in await store.list_webhooks("alice")] == [kept.id, gone.id]


async def test_many_gaps_at_once_are_merged_to_a_bound_and_none_is_let_go_early(
    store: SqlJobStore, make_job: Any
) -> None:
    job = (await store.create_or_get(make_job(key="k"))).job.id
    hook = await store.create_webhook(
        "alice", "http://127.0.0.1:9/h", ["job.failed"], all_owners=False
    )
    now = dt.datetime.now(dt.UTC)
    many = MAX_GAPS + 50

    async def failed_at(*ids: int) -> None:
        async with store.engine.begin() as conn:
            for event_id in ids:
                await conn.execute(
                    job_events.insert().values(
                        id=event_id,
                        job_id=job,
                        owner_id="alice",
                        kind="job_failed",
                        detail={},
                        at=now.replace(tzinfo=None),
                    )
                )

    top = hook.seen
    # Every other id is missing (as under many rolled-back transactions): one gap each.
    await failed_at(*(top + 2 * n for n in range(1, many + 1)))
    assert len(await enqueue_all(store, hook.id, now)) == many
    held = await store.get_webhook(hook.id, None)
    assert held is not None and held.seen == top + 2 * many
    assert len(held.gaps) <= 2  # noticed in one pass: one range (two across a bucket's end)
    missing = {top + 2 * n - 1 for n in range(1, many + 1)}
    assert all(any(lo <= i <= hi for lo, hi, _ in held.gaps) for i in missing)
    # A missing id that commits late is heard of once, whichever merged gap holds it.
    await failed_at(top + 1, top + 2 * many - 1)
    assert await enqueue_all(store, hook.id, now) == [job, job]
    assert await enqueue_all(store, hook.id, now) == []
    later = now + SETTLE + dt.timedelta(seconds=1)
    assert await enqueue_all(store, hook.id, later) == []
    settled = await store.get_webhook(hook.id, None)
    assert settled is not None and settled.gaps == () and settled.cursor == settled.seen
