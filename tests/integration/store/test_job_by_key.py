"""A job found by its owner and Idempotency-Key (``get_job_by_key``), on both databases."""

from __future__ import annotations

from typing import Any

from gateway.store import SqlJobStore


async def test_a_job_is_found_by_its_owner_and_key_with_its_attempts(
    store: SqlJobStore, make_job: Any
) -> None:
    alices = (await store.create_or_get(make_job(key="order-42"))).job
    bobs = (await store.create_or_get(make_job(owner="bob", key="order-42"))).job
    await store.create_or_get(make_job(key="order-43"))

    found = await store.get_job_by_key("alice", "order-42")
    assert found is not None
    assert (found.id, found.owner_id, found.idempotency_key) == (alices.id, "alice", "order-42")
    assert [a.number for a in found.attempts] == [1]
    assert found == await store.get_job(alices.id)
    other = await store.get_job_by_key("bob", "order-42")
    assert other is not None and other.id == bobs.id


async def test_no_job_is_found_for_a_key_the_owner_never_used(
    store: SqlJobStore, make_job: Any
) -> None:
    await store.create_or_get(make_job(key="order-42"))
    assert await store.get_job_by_key("alice", "order-4") is None
    assert await store.get_job_by_key("carol", "order-42") is None
    assert await store.get_job_by_key("Alice", "order-42") is None  # owners are exact
