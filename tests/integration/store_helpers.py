"""Helpers the store and webhook tests share: the claim they create jobs with, a job that
succeeded, and a store on a clock of the test's."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from gateway.domain.ports import Clock
from gateway.domain.records import ClaimSpec
from gateway.domain.webhooks import Delivery
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import SqlJobStore, open_store

#: A created job's first attempt claimed by this worker at once.
CLAIM = ClaimSpec(worker_id="w", lease_ttl=60.0, deadline_s=30.0)


async def succeeded(
    store: SqlJobStore,
    make_job: Any,
    key: str = "k",
    *,
    result: dict[str, Any] | None = None,
    **job: Any,
) -> str:
    """Create a job (``make_job(key=key, **job)``), its primary claimed, and let that
    attempt win with ``result`` (``{"category": "billing"}`` unless given); return its id."""
    created = await store.create_or_get(make_job(key=key, **job), CLAIM)
    assert created.claimed is not None
    await store.finalize(created.claimed.attempt.id, result or {"category": "billing"})
    return created.job.id


@contextlib.asynccontextmanager
async def clocked_store(database_url: str, clock: Clock) -> AsyncIterator[SqlJobStore]:
    """Open a store on ``database_url`` whose time is ``clock`` (a ``ManualClock``), with the
    settings' database and shortcuts as the ``store`` fixture has them; close it after."""
    store = await open_store(
        database_url,
        clock=clock,
        shortcuts=ShortcutsConfig.from_env(),
        database=DatabaseConfig.from_env(),
    )
    try:
        yield store
    finally:
        await store.close()


async def deliveries(store: SqlJobStore, webhook_id: str, owner_id: str | None) -> list[Delivery]:
    """Return a subscription's newest deliveries (its first page), newest first."""
    found = await store.list_deliveries(webhook_id, owner_id)
    assert found is not None, f"{webhook_id} is not {owner_id}'s"
    return found[0]
