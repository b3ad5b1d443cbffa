"""Every table of a job's data is keyed by its owner (issue 46, ready to distribute).

``attempts``, ``job_events`` and ``shadow_checks`` get ``owner_id`` (their job's, filled
from ``jobs``, then NOT NULL); every primary key and unique constraint of those tables
and of ``jobs`` includes it, and each foreign key to ``jobs`` is ``(job_id, owner_id)``
to ``jobs (id, owner_id)``. So each table can be distributed by ``owner_id`` and
co-located with ``jobs`` (docs/scaling.md): Citus needs the distribution column in every
primary key, unique constraint and foreign key between distributed tables.

``owner_id`` comes second in these keys: a lookup by id alone (an admin's, the dispatcher's
by attempt id, the claim's) keeps its index. The key's constraint becomes
``(idempotency_key, owner_id)``: no index but the listings' (under ``COLLATE "C"``, which
plain comparisons do not match: migration 0004) leads with ``owner_id`` any more, so a
read by id and owner, every foreign key check among them, can only take the primary key.
The other indexes are unchanged: the claim queue (partial), the listings (``COLLATE "C"``),
the events by job.

PostgreSQL: in the migration's transaction, as written here for a database of ordinary
size: a primary key rebuilt holds ``ACCESS EXCLUSIVE`` on its table while its index is
built, and the backfill rewrites every row of the three tables. docs/scaling.md gives the
path for a large database (indexes built ``CONCURRENTLY`` first, keys swapped ``USING
INDEX``, foreign keys ``NOT VALID`` then validated, the backfill in batches).

SQLite: each table is rebuilt (SQLite's own procedure for a changed key: the new table,
its rows copied, the old one dropped, the new one renamed, its indexes created again),
with foreign keys off meanwhile and checked before the commit. ``job_events`` keeps
``id`` alone as its primary key there: it is SQLite's rowid, which numbers the events
(SQLite has no sequence), and SQLite is never distributed.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-07
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

#: The constraint that turns a second click into a replay (``tables.JOBS_OWNER_KEY_UNIQUE``).
KEY_UNIQUE = "uq_jobs_owner_id_idempotency_key"
#: The tables that get their job's owner.
CHILDREN = ("attempts", "job_events", "shadow_checks")
#: Unique constraints of a job's data, before -> after (owner_id added last).
UNIQUES = {
    "attempts": ("uq_attempts_job_id_number", ("job_id", "number")),
    "shadow_checks": ("uq_shadow_checks_job_id_fallback_provider", ("job_id", "fallback_provider")),
}


def _unique_after(table: str) -> tuple[str, tuple[str, ...]]:
    old, columns = UNIQUES[table]
    return f"{old}_owner_id", (*columns, "owner_id")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _upgrade_postgres()
    else:
        _rebuild_sqlite(owner_keyed=True)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _downgrade_postgres()
    else:
        _rebuild_sqlite(owner_keyed=False)


# -- PostgreSQL -------------------------------------------------------------------------------


def _upgrade_postgres() -> None:
    for table in CHILDREN:
        op.add_column(table, sa.Column("owner_id", sa.String(200), nullable=True))
        op.execute(
            f"UPDATE {table} AS t SET owner_id = jobs.owner_id FROM jobs WHERE jobs.id = t.job_id"
        )
        op.alter_column(table, "owner_id", nullable=False)
        op.drop_constraint(f"fk_{table}_job_id_jobs", table, type_="foreignkey")
    _swap_primary_key("jobs", ("id", "owner_id"))
    # The key's constraint, key first: a read by id and owner (every foreign key check of
    # an attempt or an event, a job read by its owner) must not find an index that leads
    # with ``owner_id`` as cheap as the primary key. On tables never analyzed (or analyzed
    # small) the two cost the same and the plan PostgreSQL cached read every job of the
    # owner through the key's index: the database's CPU per sync job grew with the table
    # (2.1x after 9 rounds of bench.duel). ``ON CONFLICT (owner_id, idempotency_key)``
    # names the same columns: the order does not matter to it.
    op.drop_constraint(KEY_UNIQUE, "jobs", type_="unique")
    op.create_unique_constraint(KEY_UNIQUE, "jobs", ["idempotency_key", "owner_id"])
    for table in CHILDREN:
        _swap_primary_key(table, ("id", "owner_id"))
    for table, (old, _) in UNIQUES.items():
        new, columns = _unique_after(table)
        op.drop_constraint(old, table, type_="unique")
        op.create_unique_constraint(new, table, list(columns))
    for table in CHILDREN:
        op.create_foreign_key(
            f"fk_{table}_job_id_jobs", table, "jobs", ["job_id", "owner_id"], ["id", "owner_id"]
        )


def _downgrade_postgres() -> None:
    for table in CHILDREN:
        op.drop_constraint(f"fk_{table}_job_id_jobs", table, type_="foreignkey")
    op.drop_constraint(KEY_UNIQUE, "jobs", type_="unique")
    op.create_unique_constraint(KEY_UNIQUE, "jobs", ["owner_id", "idempotency_key"])
    for table, (old, columns) in UNIQUES.items():
        op.drop_constraint(_unique_after(table)[0], table, type_="unique")
        op.create_unique_constraint(old, table, list(columns))
    for table in (*CHILDREN, "jobs"):
        _swap_primary_key(table, ("id",))
    for table in CHILDREN:
        op.create_foreign_key(f"fk_{table}_job_id_jobs", table, "jobs", ["job_id"], ["id"])
        op.drop_column(table, "owner_id")


def _swap_primary_key(table: str, columns: tuple[str, ...]) -> None:
    op.drop_constraint(f"pk_{table}", table, type_="primary")
    op.create_primary_key(f"pk_{table}", table, list(columns))


# -- SQLite -------------------------------------------------------------------------------------


def _rebuild_sqlite(*, owner_keyed: bool) -> None:
    """Rebuild jobs and the three tables with (or, going down, without) the owner's keys.

    SQLite changes a key only by a new table; foreign keys are off meanwhile (a PRAGMA
    outside any transaction), so dropping ``jobs`` does not delete its children's rows,
    and ``foreign_key_check`` proves every row still has its job before the commit.
    """
    with op.get_context().autocommit_block():
        # The engine begins every transaction itself (``BEGIN IMMEDIATE``), this block's
        # too: end it, so that the PRAGMA takes effect, and run our own.
        op.execute("COMMIT")
        op.execute("PRAGMA foreign_keys=OFF")
        try:
            op.execute("BEGIN IMMEDIATE")
            try:
                for table in ("jobs", *CHILDREN):
                    _rebuild_table(table, owner_keyed=owner_keyed)
                broken = op.get_bind().exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise RuntimeError(f"rows without their job after the rebuild: {broken[:5]}")
            except BaseException:
                op.execute("ROLLBACK")
                raise
            op.execute("COMMIT")
        finally:
            op.execute("PRAGMA foreign_keys=ON")


def _rebuild_table(table: str, *, owner_keyed: bool) -> None:
    bind = op.get_bind()
    create = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).scalar_one()
    indexes = [
        row[0]
        for row in bind.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ?"
            " AND sql IS NOT NULL",
            (table,),
        )
    ]
    columns = [row[1] for row in bind.exec_driver_sql(f"PRAGMA table_info({table})")]
    new_sql = _keyed_sql(table, create, owner_keyed=owner_keyed)
    # SQLite keeps a renamed table's name quoted: ``CREATE TABLE "jobs" (``.
    op.execute(re.sub(rf'^CREATE TABLE "?{table}"? \(', f"CREATE TABLE _new_{table} (", new_sql))
    kept = [c for c in columns if c != "owner_id" or table == "jobs" or owner_keyed]
    values = list(kept)
    if owner_keyed and table != "jobs" and "owner_id" not in columns:
        kept.append("owner_id")
        values.append(f"(SELECT jobs.owner_id FROM jobs WHERE jobs.id = {table}.job_id)")
    op.execute(
        f"INSERT INTO _new_{table} ({', '.join(kept)}) SELECT {', '.join(values)} FROM {table}"
    )
    op.execute(f"DROP TABLE {table}")
    op.execute(f"ALTER TABLE _new_{table} RENAME TO {table}")
    for index in indexes:
        op.execute(index)


def _keyed_sql(table: str, create: str, *, owner_keyed: bool) -> str:
    """``table``'s CREATE TABLE with the owner in (or out of) its keys."""
    sql = create
    if owner_keyed:
        if table != "jobs" and not re.search(r"\bowner_id\b", sql):
            sql = re.sub(
                r"(,\s*CONSTRAINT pk_)", r", owner_id VARCHAR(200) NOT NULL\1", sql, count=1
            )
        if table != "job_events":  # its id is the rowid that numbers events
            sql = sql.replace("PRIMARY KEY (id)", "PRIMARY KEY (id, owner_id)")
        sql = sql.replace(
            f"{KEY_UNIQUE} UNIQUE (owner_id, idempotency_key)",
            f"{KEY_UNIQUE} UNIQUE (idempotency_key, owner_id)",
        )
        if table in UNIQUES:
            old, columns = UNIQUES[table]
            new, after = _unique_after(table)
            sql = sql.replace(
                f"CONSTRAINT {old} UNIQUE ({', '.join(columns)})",
                f"CONSTRAINT {new} UNIQUE ({', '.join(after)})",
            )
        sql = sql.replace(
            "FOREIGN KEY(job_id) REFERENCES jobs (id)",
            "FOREIGN KEY(job_id, owner_id) REFERENCES jobs (id, owner_id)",
        )
    else:
        if table != "jobs":
            sql = re.sub(r",?\s*owner_id VARCHAR\(200\) NOT NULL", "", sql, count=1)
        sql = sql.replace("PRIMARY KEY (id, owner_id)", "PRIMARY KEY (id)")
        sql = sql.replace(
            f"{KEY_UNIQUE} UNIQUE (idempotency_key, owner_id)",
            f"{KEY_UNIQUE} UNIQUE (owner_id, idempotency_key)",
        )
        if table in UNIQUES:
            old, columns = UNIQUES[table]
            new, after = _unique_after(table)
            sql = sql.replace(
                f"CONSTRAINT {new} UNIQUE ({', '.join(after)})",
                f"CONSTRAINT {old} UNIQUE ({', '.join(columns)})",
            )
        sql = sql.replace(
            "FOREIGN KEY(job_id, owner_id) REFERENCES jobs (id, owner_id)",
            "FOREIGN KEY(job_id) REFERENCES jobs (id)",
        )
    return sql
