"""Webhooks read past the last event they saw (issue 45): ``webhooks.seen``, that id, and
``webhooks.gaps``, the ids missing below it, read again until settled. A gap no longer
holds back the events after it. Existing subscriptions start with ``seen`` at their
cursor and no gap.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(JSONB(), "postgresql")
EventId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.add_column("webhooks", sa.Column("seen", EventId, nullable=False, server_default="0"))
    op.add_column("webhooks", sa.Column("gaps", Json, nullable=False, server_default="[]"))
    op.execute("UPDATE webhooks SET seen = cursor")


def downgrade() -> None:
    with op.batch_alter_table("webhooks") as batch:
        batch.drop_column("gaps")
        batch.drop_column("seen")
