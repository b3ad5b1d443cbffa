"""The schema can be distributed by owner, and the request paths go to one owner's rows.

Citus (docs/scaling.md) distributes a table by one column and co-locates tables by it: a
statement that names the distribution column's value for every distributed table it
touches runs on one node, as on one PostgreSQL. It asks two things of the schema and
one of the statements:

- every primary key and unique constraint of a distributed table includes the
  distribution column, and every foreign key between them does too (``owner_id``);
- each statement of a request path filters every distributed table it reads or writes
  by ``owner_id`` (or joins it to another on ``owner_id``), and each insert fills it.

Here the migrated schema is read back (SQLAlchemy's inspector) on PostgreSQL and SQLite
(and its keys compared with ``gateway/store/tables.py``'s on PostgreSQL),
and every statement the store sends while it runs the request paths is recorded (the
SQLAlchemy paths by ``before_cursor_execute``, the bare asyncpg one by wrapping
``pg_bare.fetch``, SQLite's bare writer by wrapping its driver) and checked. The
statements that span owners on purpose are allowed by name, each with how it runs on
Citus; any other statement without its owner fails the test.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.domain.states import AttemptReason, AttemptState, JobStatus
from gateway.settings import DatabaseConfig, ShortcutsConfig
from gateway.store import SqlJobStore, open_store, pg_bare, sqlite_bare, tables
from tests.integration.store_helpers import CLAIM

#: Distributed by ``owner_id``, co-located with ``jobs``: a job's data.
DISTRIBUTED = ("jobs", "attempts", "job_events", "shadow_checks")
#: Every other table, and why it is not distributed by owner (docs/scaling.md).
NOT_DISTRIBUTED = {
    "api_keys": "reference: read by key hash before the owner is known (every creation)",
    "provider_capacity": "reference: a provider's capacity, shared by every owner",
    "capacity_members": "reference: the processes pacing a provider, no owner",
    "webhooks": "local to the coordinator: an admin subscription hears every owner",
    "webhook_deliveries": "local to the coordinator: a subscription's, not a job's owner's",
    "alembic_version": "local to the coordinator: the schema's revision",
}
#: SQLite numbers events by the rowid, its only sequence; it is never distributed.
SQLITE_ROWID_KEY = {"job_events"}

# -- the schema --------------------------------------------------------------------------


def schema_problems(sync: sa.Connection) -> list[str]:
    """What keeps the migrated schema from being distributed by owner."""
    inspector = sa.inspect(sync)
    tables = set(inspector.get_table_names())
    problems = [
        f"{t}: a new table must be classified (DISTRIBUTED or NOT_DISTRIBUTED here)"
        for t in sorted(tables - set(DISTRIBUTED) - set(NOT_DISTRIBUTED))
    ]
    sqlite = sync.dialect.name == "sqlite"
    for table in DISTRIBUTED:
        columns = {c["name"]: c for c in inspector.get_columns(table)}
        if "owner_id" not in columns or columns["owner_id"]["nullable"]:
            problems.append(f"{table}: owner_id missing or nullable")
        pk = inspector.get_pk_constraint(table)["constrained_columns"]
        if "owner_id" not in pk and not (sqlite and table in SQLITE_ROWID_KEY):
            problems.append(f"{table}: primary key {pk} without owner_id")
        uniques = [u["column_names"] for u in inspector.get_unique_constraints(table)]
        uniques += [i["column_names"] for i in inspector.get_indexes(table) if i["unique"]]
        problems += [
            f"{table}: unique {u} without owner_id" for u in uniques if "owner_id" not in u
        ]
        for fk in inspector.get_foreign_keys(table):
            pairs = dict(zip(fk["constrained_columns"], fk["referred_columns"], strict=True))
            if fk["referred_table"] in DISTRIBUTED and pairs.get("owner_id") != "owner_id":
                problems.append(
                    f"{table}: foreign key {pairs} to {fk['referred_table']} without owner_id"
                )
    for table in NOT_DISTRIBUTED:
        if table not in tables:
            continue
        problems += [
            f"{table} (not distributed) refers to {fk['referred_table']}"
            for fk in inspector.get_foreign_keys(table)
            if fk["referred_table"] in DISTRIBUTED
        ]
    return problems


def keys_of(sync: sa.Connection) -> dict[str, Any]:
    """Each distributed table's keys as the migrated schema has them."""
    inspector = sa.inspect(sync)
    return {
        table: (
            inspector.get_pk_constraint(table)["constrained_columns"],
            sorted(u["column_names"] for u in inspector.get_unique_constraints(table)),
            sorted(
                (fk["constrained_columns"], fk["referred_table"], fk["referred_columns"])
                for fk in inspector.get_foreign_keys(table)
            ),
        )
        for table in DISTRIBUTED
    }


def keys_declared() -> dict[str, Any]:
    """The same keys as ``gateway/store/tables.py`` declares them."""
    return {
        table.name: (
            [c.name for c in table.primary_key.columns],
            sorted(
                [c.name for c in u.columns]
                for u in table.constraints
                if isinstance(u, sa.UniqueConstraint)
            ),
            sorted(
                (
                    [e.parent.name for e in fk.elements],
                    fk.referred_table.name,
                    [e.column.name for e in fk.elements],
                )
                for fk in table.foreign_key_constraints
            ),
        )
        for table in (tables.metadata.tables[name] for name in DISTRIBUTED)
    }


async def test_every_table_of_a_jobs_data_is_keyed_by_its_owner(database_url: str) -> None:
    engine = sa.ext.asyncio.create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            assert await conn.run_sync(schema_problems) == []
            if engine.dialect.name == "postgresql":  # SQLite numbers events by the rowid
                assert await conn.run_sync(keys_of) == keys_declared()
    finally:
        await engine.dispose()


# -- the statements --------------------------------------------------------------------------

#: Statements of the request paths that span owners on purpose, by a piece of their
#: text, with why. None: each request path knows its owner. The statements that do span
#: owners (the claim, the reaper, expire_overdue, the reconciler's scans, prune, admin
#: look-ups by id, webhook passes, the queue's depth) are not run here: docs/scaling.md
#: lists them with how each runs on Citus.
CROSS_OWNER: dict[str, tuple[str, str]] = {}
#: Request-path statements that do not carry the owner yet: the dispatcher decides by
#: attempt id (``finalize``, ``fail_attempt``, ``mark_unknown``, ``renew_lease``,
#: ``resolve``), and the store finds the job from the attempt. Left to do (docs/scaling.md,
#: "Left to do"): the owner passed with the attempt id (``AttemptRecord.owner_id``).
#: Listed by name so that every other statement stays checked.
NOT_YET_ROUTED: dict[str, tuple[str, str]] = {
    "finalize alone (PostgreSQL)": (
        r"^WITH j AS \( SELECT id, owner_id, xmin AS locked_xmin FROM jobs"
        r" WHERE id = \(SELECT job_id",
        "R5's one statement finds the job from the attempt id",
    ),
    "the compare-and-swap": (
        r"^UPDATE jobs SET status = 'succeeded', result = ",
        "R5's CAS by job id, in a transaction found by attempt id",
    ),
    "finalize on SQLite": (
        r"^(SELECT job_id, read_version, owner_id FROM attempts WHERE id = \?"
        r"|UPDATE attempts SET state = 'succeeded', finished_at = \?"
        r"|UPDATE attempts SET state = 'cancelled', finished_at = \?, error = \? WHERE job_id = \?"
        r"|SELECT id, job_id, .* FROM attempts WHERE job_id = \? ORDER BY number$)",
        "SQLite's R5 statements by attempt and job id",
    ),
    "an attempt moved by its id": (
        r"^UPDATE attempts SET .* WHERE attempts\.id = \S+ AND attempts\.owner_id = \(SELECT"
        r" mine\.owner_id FROM attempts AS mine WHERE mine\.id = \S+\) AND attempts\.",
        "unknown, failed, lost, resolved, a lease renewed: by attempt id, the owner read"
        " by that id in the statement (transaction.by_attempt_id)",
    ),
    "the attempt's job, found by attempt id": (
        r"^SELECT (attempts\.job_id, attempts\.owner_id|attempts\.id, .*) FROM attempts"
        r" WHERE attempts\.id = \S+$",
        "write_for_attempt: the attempt's job and owner (then the job's lock, by both)",
    ),
}

REFERENCE = re.compile(
    r"\b(FROM|JOIN|UPDATE|INTO)\s+(?:ONLY\s+)?(" + "|".join(DISTRIBUTED) + r")\b"
    r"(?:\s+(?:AS\s+)?(?!(?:WHERE|ON|SET|JOIN|LEFT|ORDER|GROUP|LIMIT|USING|WITH|FOR|RETURNING"
    r"|INNER|CROSS|UNION|VALUES|INDEXED|SELECT|OFFSET)\b)(\w+))?",
    re.IGNORECASE,
)


def unrouted(sql: str) -> list[str]:
    """The distributed tables ``sql`` touches without its owner: each insert must name
    ``owner_id`` among its columns; each other reference ``<name>.owner_id`` (or a bare
    ``owner_id`` when it is the statement's only table) compared with ``=``, or joined
    on it. A statement naming a table twice needs the owner once per name: careful, not
    a parser's proof."""
    flat = " ".join(sql.split())
    missing = []
    for match in REFERENCE.finditer(flat):
        verb, table, alias = match.group(1).upper(), match.group(2).lower(), match.group(3)
        if verb == "INTO":
            columns = re.match(r"\s*\(([^)]*)\)", flat[match.end() :])
            if columns is None or "owner_id" not in columns.group(1):
                missing.append(f"INSERT INTO {table} without owner_id")
            continue
        name = alias or table
        # ``(jobs.owner_id COLLATE "C") = $1``: the listing's (migration 0004).
        qualified = (
            rf"\b{re.escape(name)}\.owner_id( COLLATE \"C\"\))?\s*(=|IN\b)"
            rf"|=\s*{re.escape(name)}\.owner_id\b"
        )
        bare = r"(?<![\w.])owner_id\s*="
        if re.search(qualified, flat, re.IGNORECASE):
            continue
        if alias is None and len(REFERENCE.findall(flat)) == 1 and re.search(bare, flat):
            continue
        missing.append(f"{verb} {table}{' AS ' + alias if alias else ''} without owner_id")
    return missing


def allowed(sql: str) -> str | None:
    """The name under which ``sql`` spans owners on purpose (None: it must not)."""
    flat = " ".join(sql.split())
    for name, (pattern, _) in {**CROSS_OWNER, **NOT_YET_ROUTED}.items():
        if re.search(pattern, flat, re.IGNORECASE):
            return name
    return None


class Recorder:
    """Every statement the store sends, whichever way it goes."""

    def __init__(self) -> None:
        self.sql: list[str] = []

    def on_cursor(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.sql.append(statement)


class _RecordingDriver:
    """SQLite's bare writer's driver connection, its statements recorded."""

    def __init__(self, driver: Any, recorder: Recorder) -> None:
        self._driver, self._recorder = driver, recorder

    async def execute(self, sql: str, *args: Any) -> Any:
        self._recorder.sql.append(sql)
        return await self._driver.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)


@contextlib.asynccontextmanager
async def recording(store: SqlJobStore, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Recorder]:
    recorder = Recorder()
    engine: AsyncEngine = store.engine
    sa.event.listen(engine.sync_engine, "before_cursor_execute", recorder.on_cursor)
    fetch, write_transaction = pg_bare.fetch, sqlite_bare.write_transaction

    async def recorded_fetch(driver: Any, sql: str, *args: Any, **kw: Any) -> Any:
        recorder.sql.append(sql)
        return await fetch(driver, sql, *args, **kw)

    @contextlib.asynccontextmanager
    async def recorded_writer(engine: AsyncEngine) -> AsyncIterator[Any]:
        async with write_transaction(engine) as driver:
            yield _RecordingDriver(driver, recorder)

    monkeypatch.setattr(pg_bare, "fetch", recorded_fetch)
    monkeypatch.setattr(sqlite_bare, "write_transaction", recorded_writer)
    try:
        yield recorder
    finally:
        sa.event.remove(engine.sync_engine, "before_cursor_execute", recorder.on_cursor)


async def request_paths(store: SqlJobStore, make_job: Any) -> None:
    """Run every request path the API and the dispatcher take for one owner's job."""
    _, secret = await store.create_api_key("alice", frozenset({"jobs"}))
    # Creation (by owner, and by the API key's owner), replay, conflict.
    created = await store.create_or_get(make_job(key="k1"), CLAIM)
    assert created.claimed is not None
    assert await store.create_or_get_for_key(secret, make_job(key="k2")) is not None
    await store.create_or_get(make_job(key="k1"))
    await store.create_or_get(make_job(key="k1", input={"other": 1}))
    await store.create_or_get_for_key(secret, make_job(key="k1"))
    job = created.job
    # Reads: a job, a key's job, a page of the owner's list and the next, the events.
    assert await store.get_job(job.id, "alice") is not None
    assert await store.get_job_by_key("alice", "k1") is not None
    _, cursor = await store.list_jobs("alice", status=None, limit=1, cursor=None)
    await store.list_jobs("alice", status=JobStatus.RUNNING, limit=1, cursor=cursor)
    await store.events(job.id, owner_id="alice")
    await store.events(job.id, after=1, owner_id="alice")
    # The sync job decided (R5), and a lost race.
    await store.finalize(created.claimed.attempt.id, {"category": "billing"})
    # A failover after a definite failure; a manual retry; unknown; its resolution.
    second = await store.create_or_get(make_job(key="k3"), CLAIM)
    assert second.claimed is not None
    await store.fail_attempt(second.claimed.attempt.id, {"kind": "x"}, next_provider="sim-b")
    third = await store.create_or_get(make_job(key="k4"), CLAIM)
    assert third.claimed is not None
    await store.fail_attempt(third.claimed.attempt.id, {"kind": "x"})
    await store.add_attempt(third.job.id, "sim-openai", AttemptReason.MANUAL, owner_id="alice")
    fourth = await store.create_or_get(make_job(key="k5"), CLAIM)
    assert fourth.claimed is not None
    await store.renew_lease(fourth.claimed.attempt.id, "w", lease_ttl=60.0)
    await store.mark_unknown(fourth.claimed.attempt.id, {"kind": "timeout"})
    await store.resolve(fourth.claimed.attempt.id, AttemptState.SUCCEEDED, result={"c": 1})
    # A cancel by its owner.
    fifth = await store.create_or_get(make_job(key="k6"))
    await store.cancel(fifth.job.id, "alice")


@pytest.mark.parametrize("shortcuts", ["on", "off"])
async def test_every_request_path_statement_is_routed_by_its_owner(
    database_url: str, make_job: Any, monkeypatch: pytest.MonkeyPatch, shortcuts: str
) -> None:
    chosen = ShortcutsConfig() if shortcuts == "on" else ShortcutsConfig.all_off()
    store = await open_store(database_url, shortcuts=chosen, database=DatabaseConfig.from_env())
    try:
        async with recording(store, monkeypatch) as recorder:
            await request_paths(store, make_job)
    finally:
        await store.close()
    touching = [s for s in dict.fromkeys(recorder.sql) if REFERENCE.search(" ".join(s.split()))]
    assert touching, "nothing recorded"
    wrong = {
        " ".join(sql.split()): why
        for sql in touching
        if (why := unrouted(sql)) and allowed(sql) is None
    }
    assert wrong == {}, "\n\n".join(f"{why}\n{sql}" for sql, why in wrong.items())


def test_a_statement_that_loses_its_owner_filter_is_caught() -> None:
    # The mutation: the owner's read of its job's attempts without ``owner_id``.
    routed = (
        "SELECT attempts.id FROM attempts WHERE attempts.owner_id = $1"
        " AND attempts.job_id = $2 ORDER BY attempts.number"
    )
    assert unrouted(routed) == []
    lost = routed.replace("attempts.owner_id = $1 AND ", "")
    assert unrouted(lost) == ["FROM attempts without owner_id"] and allowed(lost) is None
    assert unrouted("INSERT INTO job_events (job_id, kind) VALUES (?, ?)") == [
        "INSERT INTO job_events without owner_id"
    ]
    join = "SELECT * FROM jobs AS j LEFT JOIN attempts AS a ON a.job_id = j.id WHERE j.owner_id = ?"
    assert unrouted(join) == ["JOIN attempts AS a without owner_id"]
