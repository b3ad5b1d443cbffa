"""PostgreSQL: the creations of one loop turn go in one statement (``creation_batches``).

What must hold, as for creations sent one by one: every job gets its own outcome
(created, replayed, conflict, or "cannot tell" for an unknown key or a key taken in the
same batch); a double click inside one batch makes one job; jobs created claimed keep
their claim; each job's events are its own and in order; a job the server refuses fails
alone; a caller cancelled mid-batch costs the others nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest
import sqlalchemy as sa

from gateway.domain.records import ClaimSpec, CreateOutcome, CreateResult, NewJob
from gateway.store import SqlJobStore, creation_batches
from gateway.store.tables import job_events

pytestmark = [pytest.mark.postgres, pytest.mark.shortcut]

CLAIM = ClaimSpec(worker_id="w1", lease_ttl=30.0, deadline_s=30.0)


@pytest.fixture
def pg_only(database_url: str) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite sends its creations through its one writer")


def job(make_job: Any, key: str, **changes: Any) -> NewJob:
    new: NewJob = make_job(key=key)
    return dataclasses.replace(new, **changes)


async def together(store: SqlJobStore, secret: str, *jobs: NewJob, claim: Any = None) -> list[Any]:
    """Create ``jobs`` from one loop turn (one batch), each in a task of its own."""
    return list(
        await asyncio.gather(*(store.create_or_get_for_key(secret, j, claim) for j in jobs))
    )


def hold(
    monkeypatch: pytest.MonkeyPatch, batcher: Any, method: str
) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold ``batcher``'s ``method`` on the wire: the first event is set when it is
    called, and it goes on once the second is set."""
    on_the_wire, go_on = asyncio.Event(), asyncio.Event()
    original = getattr(batcher, method)

    async def held(*args: Any) -> list[Any]:
        on_the_wire.set()
        await go_on.wait()
        return list(await original(*args))

    monkeypatch.setattr(batcher, method, held)
    return on_the_wire, go_on


async def events_of(store: SqlJobStore, job_id: str) -> list[tuple[str, str | None]]:
    async with store.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(job_events.c.kind, job_events.c.attempt_id)
            .where(job_events.c.job_id == job_id)
            .order_by(job_events.c.id)
        )
        return [(r.kind, r.attempt_id) for r in rows]


async def test_one_turns_creations_go_in_one_statement_each_with_its_own_job(
    pg_only: None, store: SqlJobStore, make_job: Any
) -> None:
    _, secret = await store.create_api_key("alice", frozenset({"jobs"}))
    batcher = store.creation.batches
    assert batcher is not None
    results = await together(store, secret, *(job(make_job, f"k{n}") for n in range(6)))
    assert batcher.sent == {6: 1}
    assert all(r.outcome is CreateOutcome.CREATED for r in results)
    assert len({r.job.id for r in results}) == 6
    for n, r in enumerate(results):
        assert r.job.idempotency_key == f"k{n}" and r.job.owner_id == "alice"
        assert [a.number for a in r.job.attempts] == [1]
        assert r.claimed is None
        stored = await store.get_job(r.job.id, "alice")
        assert stored is not None and stored.status.value == "queued"
        first = r.job.attempts[0].id
        assert await events_of(store, r.job.id) == [
            ("job_created", None),
            ("attempt_created", first),
        ]
    # One alone goes as the one-job statement, as before batches.
    (alone,) = await together(store, secret, job(make_job, "alone"))
    assert alone.outcome is CreateOutcome.CREATED and batcher.sent[1] == 1


async def test_claimed_creations_keep_their_claims_and_events(
    pg_only: None, store: SqlJobStore, make_job: Any
) -> None:
    _, secret = await store.create_api_key("alice", frozenset({"jobs"}))
    results = await together(store, secret, job(make_job, "a"), job(make_job, "b"), claim=CLAIM)
    for r in results:
        assert r.outcome is CreateOutcome.CREATED and r.claimed is not None
        first = r.job.attempts[0]
        assert first.state.value == "running" and first.lease_owner == "w1"
        assert r.claimed.attempt.id == first.id and r.claimed.job.id == r.job.id
        assert [k for k, _ in await events_of(store, r.job.id)] == [
            "job_created",
            "attempt_created",
            "attempt_running",
        ]


async def test_a_double_click_inside_one_batch_makes_one_job(
    pg_only: None, store: SqlJobStore, make_job: Any
) -> None:
    """Two clicks in one statement: the second cannot see the first's row (one
    snapshot), so the statement cannot tell for it; the caller settles it after the
    commit, as for a click on another process, and finds the first click's job."""
    _, secret = await store.create_api_key("alice", frozenset({"jobs"}))
    same = job(make_job, "k")
    other_input = job(make_job, "k", fingerprint="f" * 64)
    first, second, third = await together(store, secret, same, same, other_input)
    assert first is not None and first.outcome is CreateOutcome.CREATED
    assert second is None and third is None
    replay = await store.create_or_get(dataclasses.replace(same, owner_id="alice"))
    conflict = await store.create_or_get(dataclasses.replace(other_input, owner_id="alice"))
    assert replay.outcome is CreateOutcome.REPLAYED and replay.job.id == first.job.id
    assert conflict.outcome is CreateOutcome.CONFLICT and conflict.job.id == first.job.id
    async with store.engine.connect() as conn:
        count = await conn.scalar(sa.text("SELECT count(*) FROM jobs WHERE idempotency_key = 'k'"))
    assert count == 1


async def test_keys_already_taken_replay_or_conflict_in_the_batch(
    pg_only: None, store: SqlJobStore, make_job: Any
) -> None:
    _, secret = await store.create_api_key("alice", frozenset({"jobs"}))
    (made,) = await together(store, secret, job(make_job, "taken"))
    assert made is not None
    again = job(make_job, "taken")
    changed = job(make_job, "taken", fingerprint="e" * 64)
    replay, conflict, fresh = await together(store, secret, again, changed, job(make_job, "new"))
    assert isinstance(replay, CreateResult) and replay.outcome is CreateOutcome.REPLAYED
    assert isinstance(conflict, CreateResult) and conflict.outcome is CreateOutcome.CONFLICT
    assert replay.job.id == conflict.job.id == made.job.id
    assert [a.id for a in replay.job.attempts] == [a.id for a in made.job.attempts]
    assert fresh is not None and fresh.outcome is CreateOutcome.CREATED
    kinds = [k for k, _ in await events_of(store, made.job.id)]
    assert kinds == ["job_created", "attempt_created", "replayed", "conflict"]


async def test_each_job_is_its_keys_owners_and_an_unknown_key_gets_nothing(
    pg_only: None, store: SqlJobStore, make_job: Any
) -> None:
    _, alice = await store.create_api_key("alice", frozenset({"jobs"}))
    _, bob = await store.create_api_key("bob", frozenset({"jobs"}))
    revoked_id, revoked = await store.create_api_key("carol", frozenset({"jobs"}))
    await store.revoke_api_key(revoked_id)
    same_key = job(make_job, "k")
    results = await asyncio.gather(
        store.create_or_get_for_key(alice, same_key),
        store.create_or_get_for_key(bob, same_key),
        store.create_or_get_for_key("oj_not-a-key", job(make_job, "x")),
        store.create_or_get_for_key(revoked, job(make_job, "y")),
    )
    a, b, unknown, gone = results
    assert a is not None and b is not None
    assert (a.job.owner_id, b.job.owner_id) == ("alice", "bob")
    assert a.outcome is b.outcome is CreateOutcome.CREATED and a.job.id != b.job.id
    assert unknown is None and gone is None
    async with store.engine.connect() as conn:
        owners = await conn.scalars(sa.text("SELECT owner_id FROM jobs ORDER BY owner_id"))
        assert list(owners) == ["alice", "bob"]


async def test_a_job_the_server_refuses_fails_alone(
    pg_only: None, store: SqlJobStore, make_job: Any
) -> None:
    """An idempotency key longer than the column (the HTTP layer refuses those first)
    makes the whole statement fail; the batch goes again one job at a time."""
    _, secret = await store.create_api_key("alice", frozenset({"jobs"}))
    too_long = job(make_job, "x" * 1000)
    results = await asyncio.gather(
        store.create_or_get_for_key(secret, job(make_job, "ok-1")),
        store.create_or_get_for_key(secret, too_long),
        store.create_or_get_for_key(secret, job(make_job, "ok-2")),
        return_exceptions=True,
    )
    ok1, bad, ok2 = results
    assert isinstance(bad, sa.exc.DBAPIError) and not bad.connection_invalidated
    for r in (ok1, ok2):
        assert isinstance(r, CreateResult) and r.outcome is CreateOutcome.CREATED
    assert store.creation.batches is not None and store.creation.batches.sent == {3: 1, 1: 3}


async def test_a_caller_cancelled_mid_batch_leaves_the_others_their_answers(
    pg_only: None, store: SqlJobStore, make_job: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, secret = await store.create_api_key("alice", frozenset({"jobs"}))
    batcher = store.creation.batches
    assert batcher is not None
    on_the_wire, go_on = hold(monkeypatch, batcher, "_together")
    tasks = [
        asyncio.create_task(store.create_or_get_for_key(secret, job(make_job, k)))
        for k in ("a", "b", "c")
    ]
    await on_the_wire.wait()
    tasks[1].cancel()
    go_on.set()
    a, b, c = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(b, asyncio.CancelledError)
    assert isinstance(a, CreateResult) and isinstance(c, CreateResult)
    assert a.outcome is c.outcome is CreateOutcome.CREATED
    # The cancelled caller's job was created with the others; its retry replays it.
    retry = await store.create_or_get_for_key(secret, job(make_job, "b"))
    assert retry is not None and retry.outcome is CreateOutcome.REPLAYED


def spy_on_the_wire(monkeypatch: pytest.MonkeyPatch, order: list[str]) -> None:
    """Note in ``order`` when asyncpg is asked for each statement's rows."""
    import asyncpg

    original = asyncpg.Connection.fetch

    async def fetch(self: Any, *args: Any, **kwargs: Any) -> Any:
        order.append("sent")
        rows = await original(self, *args, **kwargs)
        order.append("answered")
        return rows

    monkeypatch.setattr(asyncpg.Connection, "fetch", fetch)


async def test_a_creation_sent_alone_runs_its_meanwhile_while_on_the_wire(
    pg_only: None, store: SqlJobStore, make_job: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner's prompt is rendered between the statement's send and its answer."""
    _, secret = await store.create_api_key("alice", frozenset({"jobs"}))
    order: list[str] = []
    spy_on_the_wire(monkeypatch, order)
    claim = dataclasses.replace(CLAIM, meanwhile=lambda: order.append("meanwhile"))
    result = await store.create_or_get_for_key(secret, job(make_job, "alone"), claim)
    assert result is not None and result.outcome is CreateOutcome.CREATED
    assert result.claimed is not None and store.creation.batches is not None
    assert store.creation.batches.sent == {1: 1}
    assert order == ["sent", "meanwhile", "answered"]


async def test_creations_sent_together_leave_their_meanwhile_to_the_runner(
    pg_only: None, store: SqlJobStore, make_job: Any
) -> None:
    """Under load the loop has other work: a batch runs none of its jobs' ``meanwhile``."""
    _, secret = await store.create_api_key("alice", frozenset({"jobs"}))
    ran: list[str] = []
    claim = dataclasses.replace(CLAIM, meanwhile=lambda: ran.append("meanwhile"))
    results = await together(
        store, secret, *(job(make_job, f"k{n}") for n in range(3)), claim=claim
    )
    assert all(r.outcome is CreateOutcome.CREATED and r.claimed for r in results)
    assert store.creation.batches is not None and store.creation.batches.sent == {3: 1}
    assert ran == []


async def test_a_burst_larger_than_a_batch_goes_as_several(
    pg_only: None, store: SqlJobStore, make_job: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(creation_batches, "MAX_BATCH", 4)
    _, secret = await store.create_api_key("alice", frozenset({"jobs"}))
    results = await together(store, secret, *(job(make_job, f"k{n}") for n in range(10)))
    assert all(r.outcome is CreateOutcome.CREATED for r in results)
    assert store.creation.batches is not None and store.creation.batches.sent == {4: 2, 2: 1}


async def test_creations_arriving_while_one_is_on_the_wire_go_next_together(
    pg_only: None, store: SqlJobStore, make_job: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At most ``IN_FLIGHT`` statements on the wire: what arrives meanwhile waits, then
    goes as one batch (group commit), not one statement each."""
    _, secret = await store.create_api_key("alice", frozenset({"jobs"}))
    batcher = store.creation.batches
    assert batcher is not None and creation_batches.IN_FLIGHT == 1
    on_the_wire, go_on = hold(monkeypatch, batcher, "_alone")
    first = asyncio.create_task(store.create_or_get_for_key(secret, job(make_job, "first")))
    await on_the_wire.wait()
    later = [
        asyncio.create_task(store.create_or_get_for_key(secret, job(make_job, f"k{n}")))
        for n in range(4)
    ]
    await asyncio.sleep(0.05)
    assert batcher.sent == {} and not any(t.done() for t in later)
    go_on.set()
    results = await asyncio.gather(first, *later)
    assert all(r is not None and r.outcome is CreateOutcome.CREATED for r in results)
    assert batcher.sent == {1: 1, 4: 1}


async def test_a_batch_of_new_jobs_looks_no_key_up_even_with_a_plan_made_on_empty_tables(
    pg_only: None,
    store: SqlJobStore,
    make_job: Any,
    monkeypatch: pytest.MonkeyPatch,
    database_url: str,
) -> None:
    """The taken-key lookup runs only for the jobs the batch did not insert. ``9fc7808``'s
    statement looked every job up before asking whether it was inserted, and its plan,
    cached on empty tables, scanned an index per job: 4-6 ms a batch. Here the plan is
    PostgreSQL's generic one (what a connection keeps after five executions), made on
    empty tables, and run with ``EXPLAIN ANALYZE``."""
    import asyncpg

    _, secret = await store.create_api_key("alice", frozenset({"jobs"}))
    batcher = store.creation.batches
    assert batcher is not None
    captured: list[tuple[Any, ...]] = []

    async def capture(jobs: Any, timeout: float) -> list[Any]:
        captured.extend(jobs)
        raise RuntimeError("not sent: the test runs it")

    monkeypatch.setattr(batcher, "_together", capture)
    await asyncio.gather(
        *(store.create_or_get_for_key(secret, job(make_job, f"k{n}")) for n in range(3)),
        return_exceptions=True,
    )
    assert len(captured) == 3
    args = creation_batches.batch_parameters(captured)
    conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        sql = creation_batches.CREATE_BY_KEY_BATCH
        types = [
            f"{t.name[1:]}[]" if t.name.startswith("_") else t.name
            for t in (await conn.prepare(sql)).get_parameters()
        ]
        literals = [
            f"{await conn.fetchval(f'SELECT quote_nullable(($1::{t})::text)', v)}::{t}"
            for t, v in zip(types, args, strict=True)
        ]
        await conn.execute(f"PREPARE batch AS {sql}")
        explained = await conn.fetchval(
            f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE batch({', '.join(literals)})"
        )
    finally:
        await conn.close()

    def scans_of_jobs(node: dict[str, Any]) -> list[dict[str, Any]]:
        own = [node] if node.get("Relation Name") == "jobs" and "Scan" in node["Node Type"] else []
        return own + [s for child in node.get("Plans", []) for s in scans_of_jobs(child)]

    plan = json.loads(explained)[0]
    assert plan["Plan"]["Actual Rows"] == 3  # the three jobs were created
    scans = scans_of_jobs(plan["Plan"])
    assert scans, "the plan has the taken-key lookup"
    assert all(s["Actual Loops"] == 0 for s in scans), scans
