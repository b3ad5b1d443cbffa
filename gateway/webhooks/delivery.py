"""The delivery service (issue 45): read each subscription's new events off the audit
trail, write them as deliveries, and send the deliveries due, signed.

Every ``interval`` seconds, a pass: for each live subscription, the events past its cursor
become deliveries (the job as the API shows it, rendered once, so every try sends the same
body) in one transaction with the cursor's move; then the deliveries due are claimed for
``lease`` seconds and sent. A 2xx is delivered; 410 gives up and disables the
subscription; anything else (another status, a redirect, no answer, a destination now
refused) is tried again after the next step of ``[webhooks] retry_schedule``, and after
the last one has failed. Nothing is lost to a crash: the events stay in ``job_events``
until the cursor moves, and a delivery claimed but not recorded is due again when its
lease ends (at least once: a receiver dedupes on ``webhook-id``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from gateway.domain.ports import Clock, JobStore
from gateway.domain.records import JobRecord
from gateway.domain.webhooks import (
    Delivery,
    DeliveryStatus,
    NewDelivery,
    Webhook,
    payload_time,
    signature,
)
from gateway.periodic import Periodic
from gateway.webhooks.config import WebhooksConfig
from gateway.webhooks.destinations import check, pinned
from gateway.webhooks.metrics import TryOutcome, WebhookMetrics

log = logging.getLogger("onejob.webhooks")
GONE = "gone"  #: why a subscription whose endpoint answered 410 was disabled
SCHEDULE = "schedule"  #: why a delivery was given up when its last try failed
REFUSED = "refused: "  #: how the error of a try to a refused destination begins


class WebhookDelivery(Periodic):
    """Turn new audit events into deliveries and send those due (a ``BackgroundService``)."""

    task_name = "onejob-webhooks"

    def __init__(
        self,
        store: JobStore,
        config: WebhooksConfig,
        client: httpx.AsyncClient,
        *,
        render: Callable[[JobRecord], dict[str, Any]],
        clock: Clock,
        metrics: WebhookMetrics | None = None,
    ) -> None:
        super().__init__(config.interval)
        self._store = store
        self._config = config
        self._client = client
        self._render = render
        self._clock = clock
        self._metrics = metrics

    async def start(self) -> None:
        """Start the loop; its first pass runs at once, off the caller's path."""
        self._stop.clear()
        self._task = asyncio.create_task(self._passes(), name=self.task_name)

    async def stopped(self) -> None:
        """Close the client."""
        await self._client.aclose()

    async def _passes(self) -> None:
        while not self._stop.is_set():
            await self.tick()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval)

    async def tick(self) -> None:
        """Run one pass; a database away or a bug is logged, never the loop's end."""
        try:
            await self.run_pass()
        except Exception as exc:
            if not self._store.unavailable(exc, "webhook delivery"):
                log.exception("a webhook pass failed")

    async def run_pass(self) -> int:
        """Collect every live subscription's new events, then send what is due; return how
        many deliveries were sent (whatever their outcome)."""
        hooks = await self._store.list_webhooks(None, enabled_only=True)
        if not hooks:
            return 0  # no subscription: nothing more is read
        await self.collect(hooks)
        due = await self._store.due_deliveries(lease=self._config.lease, limit=self._config.batch)
        await asyncio.gather(*(self.send(d, h) for d, h in due))
        return len(due)

    async def collect(self, hooks: Sequence[Webhook]) -> None:
        """Write the subscriptions' new events as deliveries and move their cursors. Each
        job is read once and rendered once a pass, however many subscriptions hear of it
        and however many of its events they hear of."""
        settle = dt.timedelta(seconds=self._config.settle)
        batches = await self._store.webhook_events(hooks, settle_before=self._clock.now() - settle)
        rendered: dict[str, dict[str, Any]] = {}
        for batch in batches:
            deliveries = []
            for event_id, kind, job_id, at in batch.events:
                job = batch.jobs.get(job_id)
                if job is None:  # pruned meanwhile
                    continue
                if job_id not in rendered:
                    rendered[job_id] = self._render(job)
                payload = {"type": kind, "timestamp": payload_time(at), "data": rendered[job_id]}
                deliveries.append(NewDelivery(event_id, kind, job_id, payload))
            hook = batch.webhook
            moved = (batch.cursor, batch.seen, batch.gaps) != (hook.cursor, hook.seen, hook.gaps)
            if deliveries or moved:
                await self._store.enqueue_deliveries(batch, deliveries)

    async def send(self, delivery: Delivery, hook: Webhook) -> None:
        """Send one delivery, signed, and record its outcome."""
        answer: int | None = None
        error: str | None = None
        where = await check(hook.url, self._config.allow_hosts)
        if where.refusal is not None:
            error = f"{REFUSED}{where.refusal}"
        else:
            now = self._clock.now()
            body = json.dumps(delivery.payload, separators=(",", ":")).encode()
            stamp = int(now.timestamp())
            headers = {
                "content-type": "application/json",
                "user-agent": "onejob-webhooks",
                "webhook-id": delivery.id,
                "webhook-timestamp": str(stamp),
                "webhook-signature": signature(hook.secrets_at(now), delivery.id, stamp, body),
            }
            url = hook.url
            extensions: dict[str, Any] = {}
            if where.address is not None:
                url, host, extensions = pinned(hook.url, where.address)
                headers.update(host)
            try:
                response = await self._client.post(
                    url,
                    content=body,
                    headers=headers,
                    timeout=self._config.timeout,
                    follow_redirects=False,
                    extensions=extensions,
                )
                answer = response.status_code
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"[:500]
        await self._record(delivery, answer, error)

    def _count(self, answer: int | None, error: str | None) -> None:
        if self._metrics is None:
            return
        if answer is not None:
            delivered = 200 <= answer < 300
            self._metrics.tried(TryOutcome.DELIVERED if delivered else TryOutcome.STATUS)
        elif error is not None and error.startswith(REFUSED):
            self._metrics.tried(TryOutcome.REFUSED)
        else:
            self._metrics.tried(TryOutcome.NO_ANSWER)

    def _given_up(self, reason: str) -> None:
        if self._metrics is not None:
            self._metrics.failed(reason)

    async def _record(self, delivery: Delivery, answer: int | None, error: str | None) -> None:
        self._count(answer, error)
        if answer is not None and 200 <= answer < 300:
            delivered = DeliveryStatus.DELIVERED
            await self._store.record_delivery(
                delivery.id, status=delivered, answer=answer, error=None, next_at=None
            )
            return
        if answer == 410:
            log.warning("webhook %s answered 410: disabled", delivery.webhook_id)
            self._given_up(GONE)
            await self._store.record_delivery(
                delivery.id,
                status=DeliveryStatus.FAILED,
                answer=answer,
                error=error,
                next_at=None,
                disable=GONE,
            )
            return
        schedule = self._config.retry_schedule
        if delivery.tries >= len(schedule):  # that was the last try
            self._given_up(SCHEDULE)
            await self._store.record_delivery(
                delivery.id, status=DeliveryStatus.FAILED, answer=answer, error=error, next_at=None
            )
            return
        later = self._clock.now() + dt.timedelta(seconds=schedule[delivery.tries])
        await self._store.record_delivery(
            delivery.id, status=DeliveryStatus.PENDING, answer=answer, error=error, next_at=later
        )
