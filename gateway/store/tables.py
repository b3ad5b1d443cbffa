"""The schema (DESIGN §2) as SQLAlchemy Core tables; Alembic migrations create it."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from gateway.domain.states import UNSENT_STATES

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
    #: Nothing is sent for the job after this; still waiting then, it fails (migration 0006).
    sa.Column("deadline_at", sa.DateTime, nullable=True),
    #: The W3C trace context the job was created in (``traceparent``, ``tracestate``): its
    #: attempts join that trace whichever process runs them (migration 0009).
    sa.Column("traceparent", sa.String(55), nullable=True),
    sa.Column("tracestate", sa.String(512), nullable=True),
    #: Keyed by owner (migration 0010): distributable by ``owner_id`` (docs/scaling.md).
    #: The owner comes second, so a lookup by id alone keeps this index.
    sa.PrimaryKeyConstraint("id", "owner_id"),
    #: Key first (migration 0010): no plain index leads with ``owner_id``, so a read by id
    #: and owner (every foreign key check) can only take the primary key.
    sa.UniqueConstraint("idempotency_key", "owner_id", name=JOBS_OWNER_KEY_UNIQUE),
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
    #: The model the provider said answered (certified models are checked against it).
    sa.Column("reported_model", sa.String(200), nullable=True),
    sa.Column("error", Json, nullable=True),
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.Column("started_at", sa.DateTime, nullable=True),
    sa.Column("finished_at", sa.DateTime, nullable=True),
    #: What the reconciler last found: ``{"last_checked_at", "finding", ...}`` (migration 0002).
    sa.Column("reconciler", Json, nullable=True),
    #: Its place in the claim queue; for ``waiting``, not sent before it (migration 0006).
    sa.Column("ready_at", sa.DateTime, nullable=True),
    #: How many times its provider said not now to it (migration 0006).
    sa.Column("waits", sa.Integer, nullable=False, server_default="0"),
    #: Its job's owner: the table is distributed and keyed by it (migration 0010).
    sa.Column("owner_id", sa.String(200), nullable=False),
    sa.PrimaryKeyConstraint("id", "owner_id"),
    sa.UniqueConstraint("job_id", "number", "owner_id"),
    sa.ForeignKeyConstraint(["job_id", "owner_id"], ["jobs.id", "jobs.owner_id"]),
    sa.Index("ix_attempts_state_created_at", "state", "created_at"),
    sa.Index("ix_attempts_state_lease_expires_at", "state", "lease_expires_at"),
)

#: The claim queue (``claim``): unsent attempts (``starting``, ``waiting``) in the order a
#: runner takes them. Partial, so attempts claimed at their creation (most of them) and
#: every finished one cost it nothing. Spelled in the claim's own words, so both planners
#: see that the claim's condition implies the index's.
UNSENT_SQL = "(" + ", ".join(f"'{state.value}'" for state in UNSENT_STATES) + ")"
UNSENT_CONDITION = f"state IN {UNSENT_SQL}"
QUEUE_INDEX = "ix_attempts_unsent_ready_at"
sa.Index(
    QUEUE_INDEX,
    attempts.c.ready_at,
    attempts.c.id,
    postgresql_where=sa.text(UNSENT_CONDITION),
    sqlite_where=sa.text(UNSENT_CONDITION),
)

job_events = sa.Table(
    "job_events",
    metadata,
    sa.Column("id", EventId, sa.Identity(), nullable=False, autoincrement=True),
    sa.Column("job_id", sa.String(40), nullable=False),
    sa.Column("attempt_id", sa.String(40), nullable=True),
    sa.Column("kind", sa.String(40), nullable=False),
    sa.Column("detail", Json, nullable=False),
    sa.Column("at", sa.DateTime, nullable=False),
    #: Its job's owner (migration 0010). The primary key is (id, owner_id) on PostgreSQL;
    #: on SQLite ``id`` alone, the rowid that numbers events (SQLite has no sequence).
    sa.Column("owner_id", sa.String(200), nullable=False),
    sa.PrimaryKeyConstraint("id", "owner_id"),
    sa.ForeignKeyConstraint(["job_id", "owner_id"], ["jobs.id", "jobs.owner_id"]),
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
    sa.Column("id", sa.String(40), nullable=False),
    sa.Column("job_id", sa.String(40), nullable=False),
    sa.Column("contract", sa.String(200), nullable=False),
    sa.Column("primary_provider", sa.String(200), nullable=False),
    sa.Column("fallback_provider", sa.String(200), nullable=False),
    #: The key the fallback was called with: the check's own, never one of the job's.
    sa.Column("downstream_key", sa.String(100), nullable=False),
    sa.Column("outcome", sa.String(16), nullable=False),  # pending|agreed|disagreed|error
    sa.Column("detail", Json, nullable=True),
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.Column("finished_at", sa.DateTime, nullable=True),
    #: Its job's owner (migration 0010).
    sa.Column("owner_id", sa.String(200), nullable=False),
    sa.PrimaryKeyConstraint("id", "owner_id"),
    sa.UniqueConstraint("job_id", "fallback_provider", "owner_id"),
    sa.ForeignKeyConstraint(["job_id", "owner_id"], ["jobs.id", "jobs.owner_id"]),
    sa.Index(
        "ix_shadow_checks_pair_created_at",
        "contract",
        "primary_provider",
        "fallback_provider",
        "created_at",
    ),
    sa.Index("ix_shadow_checks_created_at", "created_at"),
)

#: What every process sharing the database knows of a provider's capacity (issue 43): a
#: wait it asked everyone for, its open circuit, the limits it announced. Written when
#: one of these changes (a 429, a circuit opening), read by each process once per
#: ``[capacity] sync_interval``: never once per call.
provider_capacity = sa.Table(
    "provider_capacity",
    metadata,
    sa.Column("provider", sa.String(200), primary_key=True),
    #: The provider asked to wait until then (Retry-After and its kin).
    sa.Column("paused_until", sa.DateTime, nullable=True),
    sa.Column("pause_reason", sa.String(40), nullable=True),
    #: Its circuit is open until then; a probe may go after it.
    sa.Column("circuit_until", sa.DateTime, nullable=True),
    #: The limits the provider announced (its rate-limit headers), per minute.
    sa.Column("requests_per_minute", sa.Integer, nullable=True),
    sa.Column("tokens_per_minute", sa.Integer, nullable=True),
    sa.Column("updated_at", sa.DateTime, nullable=False),
)

#: The processes that pace calls to a provider now, each with its slice of the limit
#: (the limit divided by how many are here). A process renews its row while it has a
#: limit to pace by; a row past ``seen_until`` no longer counts.
capacity_members = sa.Table(
    "capacity_members",
    metadata,
    sa.Column("provider", sa.String(200), primary_key=True),
    sa.Column("instance_id", sa.String(200), primary_key=True),
    sa.Column("seen_until", sa.DateTime, nullable=False),
)

#: Webhook subscriptions (issue 45). The secret is kept as given out: signing needs it.
#: ``cursor``: every audit event (``job_events.id``) up to it was looked at, for good.
webhooks = sa.Table(
    "webhooks",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("owner_id", sa.String(200), nullable=False),
    sa.Column("all_owners", sa.Boolean, nullable=False),
    sa.Column("url", sa.String(2000), nullable=False),
    sa.Column("events", Json, nullable=False),
    sa.Column("secret", sa.String(100), nullable=False),
    sa.Column("previous_secret", sa.String(100), nullable=True),
    sa.Column("previous_until", sa.DateTime, nullable=True),
    sa.Column("cursor", EventId, nullable=False),
    #: The last event read, and the ids missing below it, read again until settled (0008).
    sa.Column("seen", EventId, nullable=False),
    sa.Column("gaps", Json, nullable=False),
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.Column("disabled_at", sa.DateTime, nullable=True),
    sa.Column("disabled_reason", sa.String(40), nullable=True),
    sa.Column("deleted_at", sa.DateTime, nullable=True),
    sa.Index("ix_webhooks_owner_id", "owner_id"),
)

#: One event for one subscription; ``id`` is its ``webhook-id``. The unique pair makes
#: reading an event twice (two processes, or a re-read past the cursor) one delivery.
webhook_deliveries = sa.Table(
    "webhook_deliveries",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("webhook_id", sa.String(40), sa.ForeignKey("webhooks.id"), nullable=False),
    sa.Column("event_id", EventId, nullable=True),
    sa.Column("type", sa.String(40), nullable=False),
    sa.Column("job_id", sa.String(40), nullable=True),
    sa.Column("payload", Json, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),  # pending|delivered|failed
    sa.Column("tries", sa.Integer, nullable=False),
    sa.Column("next_at", sa.DateTime, nullable=True),
    sa.Column("last_status", sa.Integer, nullable=True),
    sa.Column("last_error", sa.String(500), nullable=True),
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.Column("delivered_at", sa.DateTime, nullable=True),
    sa.UniqueConstraint("webhook_id", "event_id"),
    sa.Index("ix_webhook_deliveries_status_next_at", "status", "next_at"),
    sa.Index("ix_webhook_deliveries_webhook_id_created_at", "webhook_id", "created_at"),
    sa.Index("ix_webhook_deliveries_job_id", "job_id"),  # retention deletes them with the job
)
