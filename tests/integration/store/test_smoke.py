from __future__ import annotations

from gateway.domain.fingerprint import fingerprint
from gateway.domain.records import CreateOutcome, NewJob
from gateway.store import SqlJobStore


async def test_store_creates_a_job(store: SqlJobStore) -> None:
    new = NewJob("alice", "k1", fingerprint("c@1", {"a": 1}, None), "c@1", "p", None, {"a": 1})
    r = await store.create_or_get(new)
    assert r.outcome is CreateOutcome.CREATED
    r2 = await store.create_or_get(new)
    assert r2.outcome is CreateOutcome.REPLAYED
    assert r2.job.id == r.job.id
