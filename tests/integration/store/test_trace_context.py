"""A job keeps the W3C trace context it was created in (issue 45), on every creation path:
by owner or by API key, alone or in a batch (PostgreSQL), claimed or not; a replay
returns the first request's context, not its own; no header stores NULL."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from gateway.domain.records import ClaimSpec, CreateOutcome, NewJob
from gateway.store import SqlJobStore

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
STATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
OTHER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
CLAIM = ClaimSpec(worker_id="w1", lease_ttl=30.0, deadline_s=30.0)


def traced(
    make_job: Any, key: str, parent: str | None = PARENT, state: str | None = STATE
) -> NewJob:
    new: NewJob = make_job(key=key)
    return dataclasses.replace(new, traceparent=parent, tracestate=state)


async def test_every_creation_path_stores_the_context_and_reads_it_back(
    store: SqlJobStore, make_job: Any
) -> None:
    _, secret = await store.create_api_key("alice", frozenset({"jobs"}))
    by_owner = await store.create_or_get(traced(make_job, "owner"))
    claimed = await store.create_or_get(traced(make_job, "claimed"), CLAIM)
    # Several at once by key: one statement for all of them where batches are on.
    by_key = await asyncio.gather(
        *(store.create_or_get_for_key(secret, traced(make_job, f"key{n}")) for n in range(4))
    )
    made = [by_owner, claimed, *by_key]
    assert all(r is not None and r.outcome is CreateOutcome.CREATED for r in made)
    assert claimed.claimed is not None and claimed.claimed.job.traceparent == PARENT
    for result in made:
        assert result is not None
        assert (result.job.traceparent, result.job.tracestate) == (PARENT, STATE)
        stored = await store.get_job(result.job.id, "alice")
        assert stored is not None
        assert (stored.traceparent, stored.tracestate) == (PARENT, STATE)


async def test_a_replay_returns_the_first_requests_context(
    store: SqlJobStore, make_job: Any
) -> None:
    _, secret = await store.create_api_key("alice", frozenset({"jobs"}))
    first = await store.create_or_get(traced(make_job, "k"))
    again = await store.create_or_get(traced(make_job, "k", parent=OTHER, state=None))
    by_key = await store.create_or_get_for_key(secret, traced(make_job, "k", parent=OTHER))
    assert again.outcome is CreateOutcome.REPLAYED
    assert by_key is not None and by_key.outcome is CreateOutcome.REPLAYED
    for result in (again, by_key):
        assert result.job.id == first.job.id
        assert (result.job.traceparent, result.job.tracestate) == (PARENT, STATE)


async def test_no_context_stores_none(store: SqlJobStore, make_job: Any) -> None:
    made = await store.create_or_get(make_job(key="plain"))
    stored = await store.get_job(made.job.id, "alice")
    assert stored is not None and stored.traceparent is None and stored.tracestate is None
