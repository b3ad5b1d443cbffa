"""The schema (DESIGN §2) as SQLAlchemy Core tables; Alembic migrations create it."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING)

#: JSON on SQLite, JSONB on PostgreSQL.
Json = sa.JSON().with_variant(JSONB(), "postgresql")
#: 64-bit on PostgreSQL; SQLite needs plain INTEGER for its rowid alias.
EventId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

#: The constraint that turns a second click into a replay (R2).
JOBS_OWNER_KEY_UNIQUE = "uq_jobs_owner_id_idempotency_key"

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
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
    sa.UniqueConstraint("owner_id", "idempotency_key", name=JOBS_OWNER_KEY_UNIQUE),
)

#: An owner's jobs, newest first (``list_jobs``). On PostgreSQL ``owner_id`` is compared
#: under ``COLLATE "C"`` here, so a key lookup can only take the unique index, whatever
#: the statistics say (migration 0004 says why); SQLite has no such collation, nor needs it.
for _name, _rest in (
    ("ix_jobs_owner_id_id", ("id",)),
    ("ix_jobs_owner_id_status_id", ("status", "id")),
):
    sa.Index(_name, jobs.c.owner_id.collate("C"), *(jobs.c[c] for c in _rest)).ddl_if(
        dialect="postgresql"
    )
    sa.Index(_name, jobs.c.owner_id, *(jobs.c[c] for c in _rest)).ddl_if(dialect="sqlite")


attempts = sa.Table(
    "attempts",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("job_id", sa.String(40), sa.ForeignKey("jobs.id"), nullable=False),
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
    #: The model the provider said answered (certified models are checked against it).
    sa.Column("reported_model", sa.String(200), nullable=True),
    sa.Column("error", Json, nullable=True),
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.Column("started_at", sa.DateTime, nullable=True),
    sa.Column("finished_at", sa.DateTime, nullable=True),
    #: What the reconciler last found: ``{"last_checked_at", "finding", ...}`` (migration 0002).
    sa.Column("reconciler", Json, nullable=True),
    sa.UniqueConstraint("job_id", "number"),
    sa.Index("ix_attempts_state_created_at", "state", "created_at"),
    sa.Index("ix_attempts_state_lease_expires_at", "state", "lease_expires_at"),
)

job_events = sa.Table(
    "job_events",
    metadata,
    sa.Column("id", EventId, sa.Identity(), primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(40), sa.ForeignKey("jobs.id"), nullable=False),
    sa.Column("attempt_id", sa.String(40), nullable=True),
    sa.Column("kind", sa.String(40), nullable=False),
    sa.Column("detail", Json, nullable=False),
    sa.Column("at", sa.DateTime, nullable=False),
    sa.Index("ix_job_events_job_id_id", "job_id", "id"),
)

api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("owner_id", sa.String(200), nullable=False),
    sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("scopes", sa.String(200), nullable=False),
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.Column("revoked_at", sa.DateTime, nullable=True),
)

#: Shadow checks (issue 38): a succeeded job re-run on a certified fallback, off the job.
#: Nothing here touches the job: no attempt, no event. One row per (job, fallback): the
#: insert claims the check, so two processes never both call. The input is not copied
#: (the job holds it, and retention removes these rows with their job); ``detail`` keeps
#: field names and value hashes only.
shadow_checks = sa.Table(
    "shadow_checks",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("job_id", sa.String(40), sa.ForeignKey("jobs.id"), nullable=False),
    sa.Column("contract", sa.String(200), nullable=False),
    sa.Column("primary_provider", sa.String(200), nullable=False),
    sa.Column("fallback_provider", sa.String(200), nullable=False),
    #: The key the fallback was called with: the check's own, never one of the job's.
    sa.Column("downstream_key", sa.String(100), nullable=False),
    sa.Column("outcome", sa.String(16), nullable=False),  # pending|agreed|disagreed|error
    sa.Column("detail", Json, nullable=True),
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.Column("finished_at", sa.DateTime, nullable=True),
    sa.UniqueConstraint("job_id", "fallback_provider"),
    sa.Index(
        "ix_shadow_checks_pair_created_at",
        "contract",
        "primary_provider",
        "fallback_provider",
        "created_at",
    ),
    sa.Index("ix_shadow_checks_created_at", "created_at"),
)
