"""Webhook delivery (issue 45) to a loopback receiver that verifies with the reference
``standardwebhooks`` library, on SQLite and PostgreSQL: a verified ``job.succeeded``; a
500 retried with the same ``webhook-id`` on the (compressed) schedule; 410 disables the
endpoint; a schedule run out fails the delivery; both secrets sign during a rotation; a
redirect is not followed; a destination refused at send time is not called."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from standardwebhooks.webhooks import Webhook as Verifier

import gateway.store
from gateway.domain.clock import ManualClock
from gateway.domain.states import AttemptState
from gateway.domain.webhooks import EVENT_TYPES, DeliveryStatus, NewDelivery
from gateway.http.views import job_view
from gateway.metrics import Metrics
from gateway.store import SqlJobStore
from gateway.webhooks.config import WebhooksConfig
from gateway.webhooks.delivery import WebhookDelivery
from tests.integration.store_helpers import CLAIM, clocked_store, deliveries, succeeded

#: The schedule compressed: a minute, then two; the clock is moved, nothing waits.
SCHEDULE = (60.0, 120.0)
ALLOWED = WebhooksConfig(allow_hosts=("127.0.0.1",), retry_schedule=SCHEDULE)


@pytest.fixture
def clock() -> ManualClock:
    # The verifier checks the timestamp against the wall clock: start there.
    return ManualClock(dt.datetime.now(dt.UTC))


@pytest.fixture
async def store(database_url: str, clock: ManualClock) -> AsyncIterator[SqlJobStore]:
    async with clocked_store(database_url, clock) as s:
        yield s


def delivery(
    store: SqlJobStore,
    clock: ManualClock,
    config: WebhooksConfig = ALLOWED,
    metrics: Metrics | None = None,
) -> Any:
    return WebhookDelivery(
        store,
        config,
        httpx.AsyncClient(),
        render=job_view,
        clock=clock,
        metrics=metrics.webhooks if metrics else None,
    )


def verified(secret: str, got: Any) -> dict[str, Any]:
    payload: dict[str, Any] = Verifier(secret).verify(got.body, got.headers)
    return payload


async def test_a_receiver_gets_a_verified_job_succeeded_with_the_job_as_the_api_shows_it(
    store: SqlJobStore, clock: ManualClock, receiver: Any, make_job: Any
) -> None:
    hook = await store.create_webhook("alice", receiver.url, ["job.succeeded"], all_owners=False)
    job_id = await succeeded(store, make_job)
    sender = delivery(store, clock)
    try:
        assert await sender.run_pass() == 1
    finally:
        await sender.stopped()
    [got] = receiver.got
    payload = verified(hook.secret, got)
    job = await store.get_job(job_id)
    assert job is not None
    assert payload["type"] == "job.succeeded"
    assert payload["data"] == json.loads(json.dumps(job_view(job)))
    assert payload["timestamp"].endswith("Z")
    assert got.headers["webhook-id"].startswith("msg_")
    [shown] = await deliveries(store, hook.id, "alice")
    assert shown.status is DeliveryStatus.DELIVERED and shown.tries == 1
    assert shown.id == got.headers["webhook-id"] and shown.last_status == 204


async def test_a_500_is_retried_on_the_schedule_with_the_same_webhook_id(
    store: SqlJobStore, clock: ManualClock, receiver: Any, make_job: Any
) -> None:
    hook = await store.create_webhook("alice", receiver.url, ["job.succeeded"], all_owners=False)
    await succeeded(store, make_job)
    receiver.answers[:] = [500]
    sender = delivery(store, clock)
    try:
        assert await sender.run_pass() == 1
        [pending] = await deliveries(store, hook.id, "alice")
        assert pending.status is DeliveryStatus.PENDING and pending.last_status == 500
        assert pending.next_at == clock.now() + dt.timedelta(seconds=SCHEDULE[0])
        assert await sender.run_pass() == 0  # not due before the first step of the schedule
        clock.advance(61)
        assert await sender.run_pass() == 1
    finally:
        await sender.stopped()
    first, second = receiver.got
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    assert verified(hook.secret, second)["type"] == "job.succeeded"
    [done] = await deliveries(store, hook.id, "alice")
    assert done.status is DeliveryStatus.DELIVERED and done.tries == 2


async def test_a_410_disables_the_endpoint(
    store: SqlJobStore, clock: ManualClock, receiver: Any, make_job: Any
) -> None:
    hook = await store.create_webhook("alice", receiver.url, ["job.succeeded"], all_owners=False)
    await succeeded(store, make_job, "one")
    receiver.answers[:] = [410]
    sender = delivery(store, clock)
    try:
        assert await sender.run_pass() == 1
        gone = await store.get_webhook(hook.id, "alice")
        assert gone is not None and gone.disabled_reason == "gone"
        await succeeded(store, make_job, "two")
        clock.advance(3600)
        assert await sender.run_pass() == 0
    finally:
        await sender.stopped()
    assert len(receiver.got) == 1
    [failed] = await deliveries(store, hook.id, "alice")
    assert failed.status is DeliveryStatus.FAILED and failed.last_status == 410


async def test_a_delivery_fails_once_the_schedule_runs_out(
    store: SqlJobStore, clock: ManualClock, receiver: Any, make_job: Any
) -> None:
    hook = await store.create_webhook("alice", receiver.url, ["job.succeeded"], all_owners=False)
    await succeeded(store, make_job)
    receiver.answers[:] = [503, 503, 503, 503]
    sender = delivery(store, clock)
    try:
        for _ in range(len(SCHEDULE) + 1):
            assert await sender.run_pass() == 1
            clock.advance(max(SCHEDULE) + 1)
        assert await sender.run_pass() == 0
    finally:
        await sender.stopped()
    assert len(receiver.got) == len(SCHEDULE) + 1
    [failed] = await deliveries(store, hook.id, "alice")
    assert failed.status is DeliveryStatus.FAILED and failed.tries == len(SCHEDULE) + 1


async def test_during_a_rotation_both_secrets_verify_and_a_redirect_is_not_followed(
    store: SqlJobStore, clock: ManualClock, receiver: Any, make_job: Any
) -> None:
    hook = await store.create_webhook("alice", receiver.url, ["job.succeeded"], all_owners=False)
    rotated = await store.rotate_webhook_secret(hook.id, "alice", window=3600.0)
    assert rotated is not None
    await succeeded(store, make_job)
    receiver.answers[:] = [302]
    sender = delivery(store, clock)
    try:
        assert await sender.run_pass() == 1
    finally:
        await sender.stopped()
    [got] = receiver.got  # the redirect's target was never asked
    assert len(got.headers["webhook-signature"].split(" ")) == 2
    assert verified(hook.secret, got) == verified(rotated.secret, got)
    [pending] = await deliveries(store, hook.id, "alice")
    assert pending.status is DeliveryStatus.PENDING and pending.last_status == 302


async def test_a_destination_no_longer_allowed_is_not_called(
    store: SqlJobStore, clock: ManualClock, receiver: Any, make_job: Any
) -> None:
    hook = await store.create_webhook("alice", receiver.url, ["job.succeeded"], all_owners=False)
    await succeeded(store, make_job)
    sender = delivery(store, clock, WebhooksConfig(retry_schedule=SCHEDULE))
    try:
        assert await sender.run_pass() == 1
    finally:
        await sender.stopped()
    assert receiver.got == []
    [pending] = await deliveries(store, hook.id, "alice")
    assert pending.status is DeliveryStatus.PENDING and pending.last_status is None
    assert pending.last_error is not None and "loopback" in pending.last_error


async def test_metrics_count_tries_and_give_ups_and_show_the_backlog(
    store: SqlJobStore, clock: ManualClock, receiver: Any, make_job: Any
) -> None:
    metrics = Metrics()

    def value(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    await metrics.refresh(store)
    assert value("onejob_webhook_deliveries_pending") == 0
    assert value("onejob_webhook_oldest_pending_seconds") == 0
    assert value("onejob_webhooks_disabled") == 0
    retried = await store.create_webhook("alice", receiver.url, ["job.succeeded"], all_owners=False)
    await succeeded(store, make_job, "one")
    receiver.answers[:] = [500]
    sender = delivery(store, clock, metrics=metrics)
    refused = delivery(store, clock, WebhooksConfig(retry_schedule=(60.0,)), metrics=metrics)
    try:
        assert await sender.run_pass() == 1
        assert value("onejob_webhook_tries_total", outcome="status") == 1
        await metrics.refresh(store)
        assert value("onejob_webhook_deliveries_pending") == 1
        assert (value("onejob_webhook_oldest_pending_seconds") or 0) >= 0
        clock.advance(61)
        # Loopback, no longer allowed: not called; the last try of a one-step schedule.
        assert await refused.run_pass() == 1
        assert value("onejob_webhook_tries_total", outcome="refused") == 1
        assert value("onejob_webhook_deliveries_failed_total", reason="schedule") == 1
        redone = await deliveries(store, retried.id, "alice")
        await store.redeliver(retried.id, redone[0].id, "alice")
        receiver.answers[:] = [410]
        assert await sender.run_pass() == 1
        assert value("onejob_webhook_deliveries_failed_total", reason="gone") == 1
        assert value("onejob_webhooks_disabled_by_410_total") == 1
        other = await store.create_webhook(
            "alice", receiver.url, ["job.succeeded"], all_owners=False
        )
        await succeeded(store, make_job, "two")
        assert await sender.run_pass() == 1
        assert value("onejob_webhook_tries_total", outcome="delivered") == 1
        await store.add_delivery(other.id, NewDelivery(None, "webhook.test", None, {}))
        clock.advance(30)
    finally:
        await sender.stopped()
        await refused.stopped()
    await metrics.refresh(store)
    assert value("onejob_webhook_deliveries_pending") == 1
    assert value("onejob_webhooks_disabled") == 1
    assert value("onejob_webhook_tries_total", outcome="no_answer") is None
    body, _ = metrics.render()
    assert b"onejob_webhook_oldest_pending_seconds" in body


@contextlib.contextmanager
def statements(store: SqlJobStore) -> Iterator[list[str]]:
    """Collect the SQL statements the store's engine runs meanwhile."""
    ran: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        ran.append(" ".join(statement.split()))

    sa.event.listen(store.engine.sync_engine, "before_cursor_execute", note)
    try:
        yield ran
    finally:
        sa.event.remove(store.engine.sync_engine, "before_cursor_execute", note)


async def test_a_pass_reads_each_job_once_whatever_the_subscriptions_and_events(
    store: SqlJobStore, clock: ManualClock, make_job: Any
) -> None:
    hooks = [
        await store.create_webhook("ops", f"http://127.0.0.1:9/{n}", EVENT_TYPES, all_owners=True)
        for n in range(3)
    ]
    ended = [await succeeded(store, make_job, f"k{n}") for n in range(3)]
    # One job with two events heard of: unknown, then resolved with a result.
    created = await store.create_or_get(make_job(key="unknown"), CLAIM)
    assert created.claimed is not None
    await store.mark_unknown(created.claimed.attempt.id, {"reason": "timeout"})
    await store.resolve(created.claimed.attempt.id, AttemptState.SUCCEEDED, result={"n": 1})
    ended.append(created.job.id)
    sender = delivery(store, clock)
    try:
        with statements(store) as ran:
            await sender.collect(await store.list_webhooks(None, enabled_only=True))
    finally:
        await sender.stopped()
    # Two reads of jobs (the rows, their attempts) for the pass, not two per event and
    # subscription (3 subscriptions x 5 events before).
    assert len([s for s in ran if "FROM attempts" in s]) == 1
    assert len([s for s in ran if s.startswith("SELECT") and "FROM jobs" in s]) == 1
    for hook in hooks:
        listed = await deliveries(store, hook.id, "ops")
        assert sorted(d.job_id or "" for d in listed) == sorted([*ended, created.job.id])
        [data] = {json.dumps(d.payload["data"]) for d in listed if d.job_id == created.job.id}
        assert json.loads(data)["status"] == "succeeded"


#: The store's modules a job's creation and decisions run through.
JOB_PATHS = (
    "attempts",
    "audit",
    "cancel",
    "claim",
    "create",
    "creation_batches",
    "failures",
    "finalize",
    "leases",
    "pg_bare",
    "resolve",
    "sqlite_bare",
    "sqlite_inline",
    "transaction",
)


async def test_with_no_subscription_webhooks_cost_no_query_per_job(
    store: SqlJobStore, clock: ManualClock, make_job: Any
) -> None:
    """docs/benchmarks.md measured webhooks with no subscription as free: a job's path has
    no statement of theirs (its events are the audit trail it writes anyway), and a pass
    runs one small read of the subscriptions, however many jobs ended before it."""
    store_dir = Path(gateway.store.__file__).parent
    for name in JOB_PATHS:
        assert "webhook" not in (store_dir / f"{name}.py").read_text(), name
    sender = delivery(store, clock)
    try:
        for jobs in (1, 5):
            for n in range(jobs):
                await succeeded(store, make_job, f"k{jobs}-{n}")
            with statements(store) as in_a_pass:
                assert await sender.run_pass() == 0
            [read] = [s for s in in_a_pass if not s.startswith("BEGIN")]  # SQLite's
            assert "FROM webhooks" in read and "job" not in read
    finally:
        await sender.stopped()
