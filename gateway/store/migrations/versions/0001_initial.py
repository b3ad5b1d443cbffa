"""Create jobs, attempts, job_events and api_keys.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(JSONB(), "postgresql")
EventId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("owner_id", sa.String(200), nullable=False),
        sa.Column("idempotency_key", sa.String(255), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("contract", sa.String(200), nullable=False),
        sa.Column("provider", sa.String(200), nullable=False),
        sa.Column("requested_provider", sa.String(200), nullable=True),
        sa.Column("input", Json, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("version", sa.Integer, nullable=False, server_default="1"),
        sa.Column("completed_by", sa.String(40), nullable=True),
        sa.Column("result", Json, nullable=True),
        sa.Column("error", Json, nullable=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
        sa.UniqueConstraint("owner_id", "idempotency_key", name="uq_jobs_owner_id_idempotency_key"),
    )
    op.create_index("ix_jobs_owner_id_id", "jobs", ["owner_id", "id"])
    op.create_index("ix_jobs_owner_id_status_id", "jobs", ["owner_id", "status", "id"])
    op.create_table(
        "attempts",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("job_id", sa.String(40), nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("provider", sa.String(200), nullable=False),
        sa.Column("reason", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("read_version", sa.Integer, nullable=True),
        sa.Column("lease_owner", sa.String(200), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime, nullable=True),
        sa.Column("deadline_at", sa.DateTime, nullable=True),
        sa.Column("downstream_key", sa.String(100), nullable=False),
        sa.Column("provider_request_id", sa.String(200), nullable=True),
        sa.Column("error", Json, nullable=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("started_at", sa.DateTime, nullable=True),
        sa.Column("finished_at", sa.DateTime, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_attempts"),
        sa.UniqueConstraint("job_id", "number", name="uq_attempts_job_id_number"),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_attempts_job_id_jobs"),
    )
    op.create_index("ix_attempts_state_created_at", "attempts", ["state", "created_at"])
    op.create_index("ix_attempts_state_lease_expires_at", "attempts", ["state", "lease_expires_at"])
    op.create_table(
        "job_events",
        sa.Column("id", EventId, sa.Identity(), nullable=False, autoincrement=True),
        sa.Column("job_id", sa.String(40), nullable=False),
        sa.Column("attempt_id", sa.String(40), nullable=True),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("detail", Json, nullable=False),
        sa.Column("at", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_job_events"),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_job_events_job_id_jobs"),
    )
    op.create_index("ix_job_events_job_id_id", "job_events", ["job_id", "id"])
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("owner_id", sa.String(200), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("scopes", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("revoked_at", sa.DateTime, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
        sa.UniqueConstraint("key_hash", name="uq_api_keys_key_hash"),
    )


def downgrade() -> None:
    op.drop_table("api_keys")
    op.drop_index("ix_job_events_job_id_id", "job_events")
    op.drop_table("job_events")
    op.drop_index("ix_attempts_state_lease_expires_at", "attempts")
    op.drop_index("ix_attempts_state_created_at", "attempts")
    op.drop_table("attempts")
    op.drop_index("ix_jobs_owner_id_status_id", "jobs")
    op.drop_index("ix_jobs_owner_id_id", "jobs")
    op.drop_table("jobs")
