"""PostgreSQL: autovacuum visits the hot tables after 1 % of their rows changed, not 20 %.

PostgreSQL's defaults vacuum a table once 20 % of its rows are dead (and analyze it once
10 % changed). At 10 million jobs that is 2 million dead jobs, and about 8 million dead
audit events, before anything is cleaned: ``onejob jobs prune`` of a day's jobs leaves
them dead in one go, each status change of a job and of an attempt leaves one behind, and
every scan in the meantime (prune's own next batch first) walks over them. Measured with
``python -m bench.volume`` (docs/benchmarks.md, at volume; docs/operations.md says how
to choose them): after a prune of 1 M of 10 M jobs no table reached the default's
threshold, so no vacuum ran; with these settings applied after a second prune, all three
were vacuumed within three minutes. At 1 % (plus the usual 50 rows), at 10 M jobs, each
is vacuumed after 100,000 dead jobs or attempts and about 400,000 dead events. Inserts count
too (``autovacuum_vacuum_insert_scale_factor``, PostgreSQL 13): the append-only audit
trail is frozen and marked all-visible in small steps instead of one long pass years later.

Table storage parameters only: nothing is rewritten, and ``ALTER TABLE ... SET`` takes a
``SHARE UPDATE EXCLUSIVE`` lock, which neither reads nor writes wait for. SQLite has no
autovacuum: nothing changes there.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

#: The tables whose rows change with every job, and when autovacuum visits each.
HOT_TABLES = {
    "jobs": {
        "autovacuum_vacuum_scale_factor": 0.01,
        "autovacuum_analyze_scale_factor": 0.01,
        "autovacuum_vacuum_insert_scale_factor": 0.01,
    },
    "attempts": {
        "autovacuum_vacuum_scale_factor": 0.01,
        "autovacuum_analyze_scale_factor": 0.01,
        "autovacuum_vacuum_insert_scale_factor": 0.01,
    },
    "job_events": {
        "autovacuum_vacuum_scale_factor": 0.01,
        "autovacuum_analyze_scale_factor": 0.01,
        "autovacuum_vacuum_insert_scale_factor": 0.01,
    },
    "webhook_deliveries": {
        "autovacuum_vacuum_scale_factor": 0.01,
        "autovacuum_analyze_scale_factor": 0.01,
    },
}


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, settings in HOT_TABLES.items():
        values = ", ".join(f"{name} = {value}" for name, value in settings.items())
        op.execute(f"ALTER TABLE {table} SET ({values})")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, settings in HOT_TABLES.items():
        op.execute(f"ALTER TABLE {table} RESET ({', '.join(settings)})")
