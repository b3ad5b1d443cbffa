"""Add attempts.reconciler: what the reconciler last found when it asked the provider.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    # Nullable, no default: a metadata-only change on PostgreSQL and SQLite alike.
    op.add_column("attempts", sa.Column("reconciler", Json, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("reconciler")
