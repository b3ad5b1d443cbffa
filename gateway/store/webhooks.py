"""Webhooks in the store (issue 45): subscriptions, their cursors over the audit trail,
and the deliveries to send.

Nothing here is on a job's path: creation and decision write their audit events as they
did before, and a subscription reads them after the last id it saw (``webhook_events``).
On PostgreSQL an id is drawn when the row is inserted but seen when its transaction
commits, so a smaller id may appear after a larger one was read. A missing id is kept as
a gap (its range and when it was noticed) and read again on every pass until it is
settled: older than the settling time, longer than any write transaction lives, and read
once more after that. Past ``MAX_GAPS`` gaps (many rollbacks at once would keep one
each), those noticed within the same few seconds are merged into one range, let go when
its newest part settles (``_bounded``). The cursor is the last id before the first open
gap: every id up to it is settled. New events are read past the last id seen, so a gap
never holds them back. A row read twice is one delivery (the unique ``(webhook_id,
event_id)``). See docs/decisions.md.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import sqlalchemy as sa

from gateway.domain.clock import aware
from gateway.domain.records import JobRecord
from gateway.domain.webhooks import (
    Delivery,
    DeliveryStatus,
    EventBatch,
    NewDelivery,
    Webhook,
    WebhookBacklog,
    event_type,
    new_secret,
)
from gateway.store.database import Database
from gateway.store.rows import MAX_LIST_LIMIT, job_record, naive_utc
from gateway.store.tables import attempts, job_events, jobs, webhook_deliveries, webhooks

D = webhook_deliveries
E = job_events
W = webhooks
JOBS_CHUNK = 500  #: job ids in one IN list when a pass reads its events' jobs
#: Gaps a subscription keeps one by one; beyond, those noticed within the same
#: ``GAP_BUCKET`` seconds are merged (``_bounded``).
MAX_GAPS = 100
GAP_BUCKET = 5.0
Gap = tuple[int, int, str]


def _webhook(r: Any) -> Webhook:
    return Webhook(
        id=r.id,
        owner_id=r.owner_id,
        all_owners=bool(r.all_owners),
        url=r.url,
        events=tuple(r.events),
        secret=r.secret,
        previous_secret=r.previous_secret,
        previous_until=aware(r.previous_until) if r.previous_until else None,
        cursor=r.cursor,
        seen=r.seen,
        gaps=tuple((lo, hi, noticed) for lo, hi, noticed in r.gaps),
        created_at=aware(r.created_at),
        disabled_at=aware(r.disabled_at) if r.disabled_at else None,
        disabled_reason=r.disabled_reason,
    )


def _delivery(r: Any) -> Delivery:
    return Delivery(
        id=r.id,
        webhook_id=r.webhook_id,
        event_id=r.event_id,
        type=r.type,
        job_id=r.job_id,
        payload=r.payload,
        status=DeliveryStatus(r.status),
        tries=r.tries,
        next_at=aware(r.next_at) if r.next_at else None,
        last_status=r.last_status,
        last_error=r.last_error,
        created_at=aware(r.created_at),
        delivered_at=aware(r.delivered_at) if r.delivered_at else None,
    )


def _visible(query: Any, webhook_id: str, owner_id: str | None) -> Any:
    """Narrow ``query`` to one live subscription, of ``owner_id`` unless None (admin)."""
    query = query.where(W.c.id == webhook_id, W.c.deleted_at.is_(None))
    return query if owner_id is None else query.where(W.c.owner_id == owner_id)


class WebhookRows:
    """Subscriptions, the events each hears of, and deliveries with their outcomes."""

    db: Database

    async def create_webhook(
        self, owner_id: str, url: str, events: Sequence[str], *, all_owners: bool
    ) -> Webhook:
        """Subscribe ``url`` to ``events`` from now on; return it with its new secret."""
        values = {
            "id": self.db.ids.new("wh"),
            "owner_id": owner_id,
            "all_owners": all_owners,
            "url": url,
            "events": list(events),
            "secret": new_secret(),
            "created_at": self.db.now(),
        }
        async with self.db.write() as tx:
            last = sa.select(sa.func.coalesce(sa.func.max(E.c.id), 0))
            values["cursor"] = values["seen"] = (await tx.conn.execute(last)).scalar_one()
            values["gaps"] = []
            row = (await tx.conn.execute(W.insert().values(**values).returning(W))).one()
        return _webhook(row)

    async def list_webhooks(
        self, owner_id: str | None, *, enabled_only: bool = False
    ) -> list[Webhook]:
        """Return the live subscriptions (of one owner, or all), oldest first;
        ``enabled_only``: not those disabled (an endpoint that answered 410)."""
        query = sa.select(W).where(W.c.deleted_at.is_(None)).order_by(W.c.created_at, W.c.id)
        if owner_id is not None:
            query = query.where(W.c.owner_id == owner_id)
        if enabled_only:
            query = query.where(W.c.disabled_at.is_(None))
        async with self.db.read() as conn:
            return [_webhook(r) for r in (await conn.execute(query)).all()]

    async def get_webhook(self, webhook_id: str, owner_id: str | None) -> Webhook | None:
        """Return a live subscription (``owner_id``'s, unless None), or None."""
        async with self.db.read() as conn:
            row = (await conn.execute(_visible(sa.select(W), webhook_id, owner_id))).one_or_none()
        return None if row is None else _webhook(row)

    async def delete_webhook(self, webhook_id: str, owner_id: str | None) -> bool:
        """Delete a subscription (its deliveries stop); say whether it was live."""
        async with self.db.write() as tx:
            moved = await tx.conn.execute(
                _visible(W.update(), webhook_id, owner_id).values(deleted_at=self.db.now())
            )
            return moved.rowcount == 1

    async def rotate_webhook_secret(
        self, webhook_id: str, owner_id: str | None, *, window: float
    ) -> Webhook | None:
        """Give a subscription a new secret; the old one signs too for ``window`` seconds."""
        now = self.db.now()
        async with self.db.write() as tx:
            row = (
                await tx.conn.execute(
                    _visible(W.update(), webhook_id, owner_id)
                    .values(
                        secret=new_secret(),
                        previous_secret=W.c.secret,
                        previous_until=now + dt.timedelta(seconds=window),
                    )
                    .returning(W)
                )
            ).one_or_none()
        return None if row is None else _webhook(row)

    async def webhook_events(
        self, webhooks: Sequence[Webhook], *, settle_before: dt.datetime, limit: int = 1000
    ) -> list[EventBatch]:
        """Read the audit events each subscription has not looked at: those in its gaps and
        those past the last id it saw; return, per subscription, those it hears of and has
        no delivery for yet, and its new cursor, last id seen and gaps (the module says
        how), with the jobs of all those events, each read once whatever the number of
        subscriptions and events (shared by the batches)."""
        read = []
        async with self.db.read() as conn:
            for hook in webhooks:
                read.append(await self._events_of(conn, hook, settle_before, limit))
            wanted = {job_id for batch in read for _e, _k, job_id, _a in batch.events}
            found = await _jobs(conn, sorted(wanted))
        return [dataclasses.replace(batch, jobs=found) for batch in read]

    async def _events_of(
        self, conn: Any, webhook: Webhook, settle_before: dt.datetime, limit: int
    ) -> EventBatch:
        enqueued = sa.exists().where(D.c.webhook_id == webhook.id, D.c.event_id == E.c.id)
        columns = sa.select(E.c.id, E.c.job_id, E.c.kind, E.c.detail, E.c.at, jobs.c.owner_id)
        base = columns.add_columns(enqueued.label("enqueued")).select_from(
            E.join(jobs, jobs.c.id == E.c.job_id)
        )
        fresh = base.where(E.c.id > webhook.seen).order_by(E.c.id).limit(limit)
        in_gaps = [E.c.id.between(lo, hi) for lo, hi, _ in webhook.gaps]
        settled = naive_utc(settle_before)
        # A gap is read once more after it settled, before it is let go.
        filled = (await conn.execute(base.where(sa.or_(*in_gaps)))).all() if in_gaps else []
        rows = (await conn.execute(fresh)).all()
        gaps = [g for g in webhook.gaps if dt.datetime.fromisoformat(g[2]) > settled]
        seen, noticed_now = webhook.seen, self.db.now().isoformat()
        for r in rows:
            if r.id > seen + 1:
                gaps.append((seen + 1, r.id - 1, noticed_now))
            seen = r.id
        gaps = _bounded(gaps)
        cursor = min(lo for lo, _, _ in gaps) - 1 if gaps else seen
        events = []
        for r in [*filled, *rows]:
            kind = event_type(r.kind, r.detail)
            mine = webhook.all_owners or r.owner_id == webhook.owner_id
            if kind in webhook.events and mine and not r.enqueued:
                events.append((r.id, kind, r.job_id, aware(r.at)))
        return EventBatch(webhook, events, max(cursor, webhook.cursor), seen, tuple(gaps))

    async def enqueue_deliveries(
        self, batch: EventBatch, deliveries: Sequence[NewDelivery]
    ) -> None:
        """Write deliveries to send now (one per event: a second is ignored) and the
        subscription's new cursor, last id seen and gaps, in one transaction (unless another
        process moved them first: it read the same events)."""
        now = self.db.now()
        hook = batch.webhook
        async with self.db.write() as tx:
            if deliveries:
                insert = self.db.insert(D).on_conflict_do_nothing(
                    index_elements=[D.c.webhook_id, D.c.event_id]
                )
                rows = [_pending(self.db.ids.new("msg"), hook.id, d, now) for d in deliveries]
                await tx.conn.execute(insert, rows)
            await tx.conn.execute(
                W.update()
                .where(W.c.id == hook.id, W.c.seen == hook.seen, W.c.cursor == hook.cursor)
                .values(cursor=batch.cursor, seen=batch.seen, gaps=[list(g) for g in batch.gaps])
            )

    async def add_delivery(self, webhook_id: str, delivery: NewDelivery) -> Delivery:
        """Write one delivery to send now (a test event); return it."""
        row = _pending(self.db.ids.new("msg"), webhook_id, delivery, self.db.now())
        async with self.db.write() as tx:
            written = (await tx.conn.execute(D.insert().values(**row).returning(D))).one()
        return _delivery(written)

    async def due_deliveries(
        self, *, lease: float, limit: int = 50
    ) -> list[tuple[Delivery, Webhook]]:
        """Claim deliveries due now, of live subscriptions: each is not due again for
        ``lease`` seconds, so no other process sends it meanwhile."""
        now = self.db.now()
        query = (
            sa.select(D, *(c.label(f"w_{c.name}") for c in W.c))
            .select_from(D.join(W, W.c.id == D.c.webhook_id))
            .where(
                D.c.status == DeliveryStatus.PENDING.value,
                D.c.next_at <= now,
                W.c.deleted_at.is_(None),
                W.c.disabled_at.is_(None),
            )
            .order_by(D.c.next_at, D.c.id)
            .limit(limit)
        )
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).all()
        claimed = []
        later = now + dt.timedelta(seconds=lease)
        async with self.db.write() as tx:
            for r in rows:
                moved = await tx.conn.execute(
                    D.update()
                    .where(D.c.id == r.id, D.c.status == "pending", D.c.next_at == r.next_at)
                    .values(next_at=later)
                )
                if moved.rowcount == 1:
                    hook = {c.name: getattr(r, f"w_{c.name}") for c in W.c}
                    claimed.append((_delivery(r), _webhook(SimpleNamespace(**hook))))
        return claimed

    async def record_delivery(
        self,
        delivery_id: str,
        *,
        status: DeliveryStatus,
        answer: int | None,
        error: str | None,
        next_at: dt.datetime | None,
        disable: str | None = None,
    ) -> None:
        """Write one try's outcome; ``disable``: why the subscription stops (a 410)."""
        now = self.db.now()
        async with self.db.write() as tx:
            moved = await tx.conn.execute(
                D.update()
                .where(D.c.id == delivery_id, D.c.status == DeliveryStatus.PENDING.value)
                .values(
                    status=status.value,
                    tries=D.c.tries + 1,
                    last_status=answer,
                    last_error=error[:500] if error else None,
                    next_at=None if next_at is None else naive_utc(next_at),
                    delivered_at=now if status is DeliveryStatus.DELIVERED else None,
                )
                .returning(D.c.webhook_id)
            )
            webhook_id = moved.scalar_one_or_none()
            if disable is not None and webhook_id is not None:
                await tx.conn.execute(
                    W.update()
                    .where(W.c.id == webhook_id, W.c.disabled_at.is_(None))
                    .values(disabled_at=now, disabled_reason=disable)
                )

    async def list_deliveries(
        self,
        webhook_id: str,
        owner_id: str | None,
        *,
        limit: int = 100,
        cursor: str | None = None,
    ) -> tuple[list[Delivery], str | None] | None:
        """Return a page of a subscription's deliveries, newest first, and the cursor of the
        next page (None: the last); None when the subscription is not visible. Raise
        ``ValueError`` for a cursor that names none of its deliveries."""
        if await self.get_webhook(webhook_id, owner_id) is None:
            return None
        limit = max(1, min(limit, MAX_LIST_LIMIT))
        query = sa.select(D).where(D.c.webhook_id == webhook_id)
        async with self.db.read() as conn:
            if cursor is not None:
                after = _delivery_after(cursor)
                at = (
                    await conn.execute(
                        sa.select(D.c.created_at).where(
                            D.c.id == after, D.c.webhook_id == webhook_id
                        )
                    )
                ).scalar_one_or_none()
                if at is None:
                    raise ValueError("invalid cursor")
                query = query.where(
                    sa.or_(D.c.created_at < at, sa.and_(D.c.created_at == at, D.c.id < after))
                )
            query = query.order_by(D.c.created_at.desc(), D.c.id.desc()).limit(limit + 1)
            rows = (await conn.execute(query)).all()
        page = [_delivery(r) for r in rows[:limit]]
        more = len(rows) > limit
        return page, (_delivery_cursor(page[-1].id) if more else None)

    async def webhook_backlog(self) -> WebhookBacklog:
        """Return the deliveries waiting (every subscription's) and the live subscriptions
        disabled, for the metrics: one statement, the pending ones found through the index
        on (status, next_at)."""
        pending = D.c.status == DeliveryStatus.PENDING.value
        query = sa.select(
            sa.select(sa.func.count()).select_from(D).where(pending).scalar_subquery(),
            sa.select(sa.func.min(D.c.created_at)).where(pending).scalar_subquery(),
            sa.select(sa.func.count())
            .select_from(W)
            .where(W.c.deleted_at.is_(None), W.c.disabled_at.is_not(None))
            .scalar_subquery(),
        )
        async with self.db.read_once() as conn:
            waiting, oldest, gone = (await conn.execute(query)).one()
        return WebhookBacklog(
            pending=int(waiting),
            oldest_pending=aware(oldest) if oldest is not None else None,
            disabled=int(gone),
        )

    async def redeliver(
        self, webhook_id: str, delivery_id: str, owner_id: str | None
    ) -> Delivery | None:
        """Send a delivery again now, with the same ``webhook-id`` and a fresh schedule;
        None when it is not visible."""
        if await self.get_webhook(webhook_id, owner_id) is None:
            return None
        async with self.db.write() as tx:
            row = (
                await tx.conn.execute(
                    D.update()
                    .where(D.c.id == delivery_id, D.c.webhook_id == webhook_id)
                    .values(
                        status=DeliveryStatus.PENDING.value,
                        tries=0,
                        next_at=self.db.now(),
                        delivered_at=None,
                    )
                    .returning(D)
                )
            ).one_or_none()
        return None if row is None else _delivery(row)


def _delivery_cursor(delivery_id: str) -> str:
    """Make an opaque paging cursor from a delivery id (as ``encode_cursor`` does a job's)."""
    return base64.urlsafe_b64encode(delivery_id.encode()).decode().rstrip("=")


def _delivery_after(cursor: str) -> str:
    """Read a deliveries' paging cursor; raise ValueError when it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError("invalid cursor") from exc
    if not raw.startswith("msg_") or not raw.isprintable() or len(raw) > 40:
        raise ValueError("invalid cursor")
    return raw


def _bounded(gaps: list[Gap]) -> list[Gap]:
    """Past ``MAX_GAPS`` gaps (ascending), merge the neighbours noticed within the same
    ``GAP_BUCKET`` seconds into one range, let go when its newest part has settled: many
    rollbacks within the settling time would otherwise keep a gap each, each read again by
    a range of its own on every pass. So a subscription keeps at most ``MAX_GAPS`` gaps, or
    one per ``GAP_BUCKET`` seconds of the settling time (25 for the default 120 s) when
    more were noticed; no id is let go sooner than alone, and none more than
    ``GAP_BUCKET`` seconds later. A merged range covers ids between its parts that did
    commit: read again, each is still one delivery (the unique ``(webhook_id, event_id)``
    and the ``enqueued`` check)."""
    if len(gaps) <= MAX_GAPS:
        return gaps

    def bucket(noticed: str) -> int:
        return int(dt.datetime.fromisoformat(noticed).timestamp() // GAP_BUCKET)

    merged = [gaps[0]]
    for lo, hi, noticed in gaps[1:]:
        first, _, before = merged[-1]
        if bucket(before) == bucket(noticed):
            later = max(before, noticed, key=dt.datetime.fromisoformat)
            merged[-1] = (first, hi, later)
        else:
            merged.append((lo, hi, noticed))
    return merged


async def _jobs(conn: Any, job_ids: Sequence[str]) -> dict[str, JobRecord]:
    """Read jobs with their attempts, by id: two queries a chunk of ids, not two a job."""
    found: dict[str, JobRecord] = {}
    for start in range(0, len(job_ids), JOBS_CHUNK):
        chunk = job_ids[start : start + JOBS_CHUNK]
        rows = (await conn.execute(sa.select(jobs).where(jobs.c.id.in_(chunk)))).all()
        tried = (
            await conn.execute(
                sa.select(attempts)
                .where(attempts.c.job_id.in_(chunk))
                .order_by(attempts.c.job_id, attempts.c.number)
            )
        ).all()
        by_job: dict[str, list[Any]] = {}
        for a in tried:
            by_job.setdefault(a.job_id, []).append(a)
        found.update((r.id, job_record(r, by_job.get(r.id, []))) for r in rows)
    return found


def _pending(msg_id: str, webhook_id: str, d: NewDelivery, now: dt.datetime) -> dict[str, Any]:
    return {
        "id": msg_id,
        "webhook_id": webhook_id,
        "event_id": d.event_id,
        "type": d.type,
        "job_id": d.job_id,
        "payload": d.payload,
        "status": DeliveryStatus.PENDING.value,
        "tries": 0,
        "next_at": now,
        "created_at": now,
    }
