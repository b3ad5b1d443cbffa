"""Waiting for capacity (issue 43): a job's deadline, an attempt's place in the claim queue
and its waits, the claim queue's index, and what processes share of a provider's capacity.

- ``jobs.deadline_at``: nothing is sent for a job after it (NULL for jobs made before it:
  no deadline);
- ``attempts.ready_at``: an unsent attempt's place in the claim queue (for ``waiting``, the
  time before which it is not sent again), and ``attempts.waits``: how many times its
  provider said not now to it. Attempts still queued get their creation time;
- ``ix_attempts_unsent_ready_at``: the claim queue, a partial index over unsent attempts
  only (built ``CONCURRENTLY`` on PostgreSQL: writers are not blocked on a large table);
- ``provider_capacity`` and ``capacity_members``: new tables.

Adding a nullable column, or one with a constant default, rewrites no row on PostgreSQL
(11 and later) or SQLite.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

UNSENT = "state IN ('starting', 'waiting')"


def upgrade() -> None:
    op.add_column("jobs", sa.Column("deadline_at", sa.DateTime, nullable=True))
    op.add_column("attempts", sa.Column("ready_at", sa.DateTime, nullable=True))
    op.add_column("attempts", sa.Column("waits", sa.Integer, nullable=False, server_default="0"))
    op.execute("UPDATE attempts SET ready_at = created_at WHERE state = 'starting'")
    op.create_table(
        "provider_capacity",
        sa.Column("provider", sa.String(200), nullable=False),
        sa.Column("paused_until", sa.DateTime, nullable=True),
        sa.Column("pause_reason", sa.String(40), nullable=True),
        sa.Column("circuit_until", sa.DateTime, nullable=True),
        sa.Column("requests_per_minute", sa.Integer, nullable=True),
        sa.Column("tokens_per_minute", sa.Integer, nullable=True),
        sa.Column("updated_at", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint("provider", name="pk_provider_capacity"),
    )
    op.create_table(
        "capacity_members",
        sa.Column("provider", sa.String(200), nullable=False),
        sa.Column("instance_id", sa.String(200), nullable=False),
        sa.Column("seen_until", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint("provider", "instance_id", name="pk_capacity_members"),
    )
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            op.execute(
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_attempts_unsent_ready_at"
                f" ON attempts (ready_at, id) WHERE {UNSENT}"
            )
    else:
        op.create_index(
            "ix_attempts_unsent_ready_at",
            "attempts",
            ["ready_at", "id"],
            sqlite_where=sa.text(UNSENT),
        )


def downgrade() -> None:
    op.drop_index("ix_attempts_unsent_ready_at", table_name="attempts")
    op.drop_table("capacity_members")
    op.drop_table("provider_capacity")
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("waits")
        batch.drop_column("ready_at")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("deadline_at")
