"""A job keeps the W3C trace context it was created in (issue 45): ``jobs.traceparent``
and ``jobs.tracestate``, so that an attempt another process runs later (a worker, a
failover after an operator's resolution, the reconciler's lookup) still joins the
caller's trace. Nullable: jobs from before, and jobs created without a ``traceparent``.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable columns without a default: PostgreSQL adds them without rewriting the table.
    op.add_column("jobs", sa.Column("traceparent", sa.String(55), nullable=True))
    op.add_column("jobs", sa.Column("tracestate", sa.String(512), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("tracestate")
        batch.drop_column("traceparent")
