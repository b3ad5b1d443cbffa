"""Webhooks (issue 45): subscriptions and their deliveries, two new tables.

Nothing else changes: events are read from ``job_events`` with a cursor per subscription
(docs/decisions.md says why), so creation and decision write what they wrote before.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(JSONB(), "postgresql")
EventId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "webhooks",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("owner_id", sa.String(200), nullable=False),
        sa.Column("all_owners", sa.Boolean, nullable=False),
        sa.Column("url", sa.String(2000), nullable=False),
        sa.Column("events", Json, nullable=False),
        sa.Column("secret", sa.String(100), nullable=False),
        sa.Column("previous_secret", sa.String(100), nullable=True),
        sa.Column("previous_until", sa.DateTime, nullable=True),
        sa.Column("cursor", EventId, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("disabled_at", sa.DateTime, nullable=True),
        sa.Column("disabled_reason", sa.String(40), nullable=True),
        sa.Column("deleted_at", sa.DateTime, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_webhooks"),
    )
    op.create_index("ix_webhooks_owner_id", "webhooks", ["owner_id"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("webhook_id", sa.String(40), nullable=False),
        sa.Column("event_id", EventId, nullable=True),
        sa.Column("type", sa.String(40), nullable=False),
        sa.Column("job_id", sa.String(40), nullable=True),
        sa.Column("payload", Json, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("tries", sa.Integer, nullable=False),
        sa.Column("next_at", sa.DateTime, nullable=True),
        sa.Column("last_status", sa.Integer, nullable=True),
        sa.Column("last_error", sa.String(500), nullable=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("delivered_at", sa.DateTime, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_deliveries"),
        sa.ForeignKeyConstraint(
            ["webhook_id"], ["webhooks.id"], name="fk_webhook_deliveries_webhook_id_webhooks"
        ),
        sa.UniqueConstraint(
            "webhook_id", "event_id", name="uq_webhook_deliveries_webhook_id_event_id"
        ),
    )
    op.create_index(
        "ix_webhook_deliveries_status_next_at", "webhook_deliveries", ["status", "next_at"]
    )
    op.create_index(
        "ix_webhook_deliveries_webhook_id_created_at",
        "webhook_deliveries",
        ["webhook_id", "created_at"],
    )
    op.create_index("ix_webhook_deliveries_job_id", "webhook_deliveries", ["job_id"])


def downgrade() -> None:
    op.drop_table("webhook_deliveries")
    op.drop_table("webhooks")
