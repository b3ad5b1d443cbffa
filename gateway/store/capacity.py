"""What processes share of a provider's capacity (issue 43), in one transaction a look.

Each process pacing calls to a provider renews its row in ``capacity_members`` (its slice
of the provider's limit is the limit divided by the live rows), publishes what it learned
(a pause the provider asked for, its circuit opening or closing, the limits it
announced) to ``provider_capacity``, and reads back what every process knows. A process
does this once per ``[capacity] sync_interval`` while it has a provider to pace or news
to tell, never once per call.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.domain.capacity import CapacityNews, SharedCapacity
from gateway.domain.clock import aware
from gateway.store.database import Database
from gateway.store.rows import naive_utc
from gateway.store.tables import capacity_members, provider_capacity


class CapacitySharing:
    """The store's capacity-sharing use case: ``share_capacity``."""

    db: Database

    async def share_capacity(
        self,
        instance_id: str,
        members: Sequence[str],
        seen_until: dt.datetime,
        news: Sequence[CapacityNews] = (),
    ) -> list[SharedCapacity]:
        """Renew this process's slice of each provider in ``members`` (and give up the
        others), publish ``news``, and return what every process knows of each provider
        that has a row."""
        now = self.db.now()
        until = naive_utc(seen_until)
        p, m = provider_capacity.c, capacity_members.c
        async with self.db.write() as tx:
            conn = tx.conn
            mine = sa.and_(m.instance_id == instance_id)
            if members:
                mine = sa.and_(mine, m.provider.not_in(list(members)))
            await conn.execute(capacity_members.delete().where(mine))
            for provider in {*members, *(n.provider for n in news)}:
                await conn.execute(
                    self.db.insert(provider_capacity)
                    .values(provider=provider, updated_at=now)
                    .on_conflict_do_nothing()
                )
            for provider in members:
                renew = self.db.insert(capacity_members).values(
                    provider=provider, instance_id=instance_id, seen_until=until
                )
                await conn.execute(
                    renew.on_conflict_do_update(
                        index_elements=[m.provider, m.instance_id], set_={"seen_until": until}
                    )
                )
            for item in news:
                await _publish(conn, item, now)
            live = (
                sa.select(sa.func.count())
                .where(m.provider == p.provider, m.seen_until > now)
                .scalar_subquery()
            )
            rows = (await conn.execute(sa.select(provider_capacity, live.label("members")))).all()
        return [
            SharedCapacity(
                provider=r.provider,
                paused_until=aware(r.paused_until) if r.paused_until else None,
                pause_reason=r.pause_reason,
                circuit_until=aware(r.circuit_until) if r.circuit_until else None,
                requests_per_minute=r.requests_per_minute,
                tokens_per_minute=r.tokens_per_minute,
                members=max(1, int(r.members)),
            )
            for r in rows
        ]


async def _publish(conn: AsyncConnection, news: CapacityNews, now: dt.datetime) -> None:
    """Write one piece of news on the provider's row (which exists): a pause only lengthens
    the one in force, a circuit opens or closes, announced limits replace the known."""
    p = provider_capacity.c
    row = p.provider == news.provider
    if news.paused_until is not None:
        until = naive_utc(news.paused_until)
        await conn.execute(
            provider_capacity.update()
            .where(row, sa.or_(p.paused_until.is_(None), p.paused_until < until))
            .values(paused_until=until, pause_reason=news.pause_reason, updated_at=now)
        )
    if news.circuit == "open" and news.circuit_until is not None:
        until = naive_utc(news.circuit_until)
        await conn.execute(
            provider_capacity.update()
            .where(row, sa.or_(p.circuit_until.is_(None), p.circuit_until < until))
            .values(circuit_until=until, updated_at=now)
        )
    elif news.circuit == "closed":
        await conn.execute(
            provider_capacity.update().where(row).values(circuit_until=None, updated_at=now)
        )
    limits = {
        name: value
        for name, value in (
            ("requests_per_minute", news.requests_per_minute),
            ("tokens_per_minute", news.tokens_per_minute),
        )
        if value is not None
    }
    if limits:
        await conn.execute(provider_capacity.update().where(row).values(**limits, updated_at=now))
