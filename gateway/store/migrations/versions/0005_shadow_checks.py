"""Add shadow_checks: succeeded jobs re-run on certified fallbacks (issue 38).

A new table only: nothing existing is rewritten, on PostgreSQL or SQLite.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-10
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "shadow_checks",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("job_id", sa.String(40), nullable=False),
        sa.Column("contract", sa.String(200), nullable=False),
        sa.Column("primary_provider", sa.String(200), nullable=False),
        sa.Column("fallback_provider", sa.String(200), nullable=False),
        sa.Column("downstream_key", sa.String(100), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("detail", Json, nullable=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("finished_at", sa.DateTime, nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_shadow_checks_job_id_jobs"),
        sa.PrimaryKeyConstraint("id", name="pk_shadow_checks"),
        sa.UniqueConstraint(
            "job_id", "fallback_provider", name="uq_shadow_checks_job_id_fallback_provider"
        ),
    )
    op.create_index(
        "ix_shadow_checks_pair_created_at",
        "shadow_checks",
        ["contract", "primary_provider", "fallback_provider", "created_at"],
    )
    op.create_index("ix_shadow_checks_created_at", "shadow_checks", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_shadow_checks_created_at", table_name="shadow_checks")
    op.drop_index("ix_shadow_checks_pair_created_at", table_name="shadow_checks")
    op.drop_table("shadow_checks")
