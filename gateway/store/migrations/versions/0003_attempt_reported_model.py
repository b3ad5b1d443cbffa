"""Add attempts.reported_model: the model the provider said answered the attempt.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, no default: a metadata-only change on PostgreSQL and SQLite alike.
    op.add_column("attempts", sa.Column("reported_model", sa.String(200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("reported_model")
