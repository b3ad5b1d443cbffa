"""PostgreSQL: the owner's listing indexes compare ``owner_id`` under ``COLLATE "C"``.

A key lookup (``owner_id = $1 AND idempotency_key = $2``, every replay) could use three
indexes that lead with ``owner_id``. On a table PostgreSQL has no statistics for, they
cost the same, and the plan a connection caches (its generic plan, made while the table
was small) took ``(owner_id, status, id)``: every replay read every job of the owner.
Measured: one key replayed at 16 connections right after 45,000 creations, 112 req/s
(docs/benchmarks.md). Under another collation the listing indexes no longer match that
condition, so the unique index is the lookup's only index, whatever the statistics say;
the listing (``gateway.store.read.list_jobs``) asks for ``COLLATE "C"`` and keeps its
indexes. ``"C"`` compares bytes, as equality under the database's default collation
does for the deterministic collations PostgreSQL builds indexes on.

The indexes are rebuilt with ``CREATE INDEX CONCURRENTLY``: writers are not blocked on a
large table (the old index serves until the new one is built). SQLite is unchanged: its
planner takes the unique index for equality on all of its columns.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

#: name -> its columns after ``owner_id``.
LISTING = {"ix_jobs_owner_id_id": "id", "ix_jobs_owner_id_status_id": "status, id"}


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    with op.get_context().autocommit_block():
        for name, rest in LISTING.items():
            new = f'{name}_c ON jobs (owner_id COLLATE "C", {rest})'
            op.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {new}")
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            op.execute(f"ALTER INDEX {name}_c RENAME TO {name}")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    with op.get_context().autocommit_block():
        for name, rest in LISTING.items():
            op.execute(
                f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name}_d ON jobs (owner_id, {rest})"
            )
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            op.execute(f"ALTER INDEX {name}_d RENAME TO {name}")
