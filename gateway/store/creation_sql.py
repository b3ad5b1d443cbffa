"""The creation transaction as SQL text, for pgbench (baseline: the statements the store sends)."""

from __future__ import annotations


def pgbench_script() -> str:
    """Return a pgbench script running the store's creation transaction with fresh ids."""
    return r"""\set k random(1, 1000000000000)
BEGIN;
INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, contract, provider, requested_provider, input, status, version, created_at, updated_at) VALUES ('job_' || md5(random()::text), 'bench', :client_id || '-' || :k, md5('x') || md5('y'), 'ticket-triage@1', 'upstream', NULL, '{"ticket_id": "SUP-42", "channel": "email", "customer": {"name": "Priya", "plan": "pro"}, "subject": "Charged twice", "body": "My card was charged twice for March."}'::jsonb, 'queued', 1, now(), now()) ON CONFLICT (owner_id, idempotency_key) DO NOTHING RETURNING *;
INSERT INTO job_events (job_id, attempt_id, kind, detail, at) SELECT id, NULL, 'job_created', '{"contract": "ticket-triage@1", "provider": "upstream"}'::jsonb, now() FROM jobs WHERE owner_id = 'bench' AND idempotency_key = :client_id || '-' || :k;
INSERT INTO attempts (id, job_id, number, provider, reason, state, downstream_key, created_at) SELECT 'att_' || md5(random()::text), id, 1, 'upstream', 'initial', 'starting', id || '/1', now() FROM jobs WHERE owner_id = 'bench' AND idempotency_key = :client_id || '-' || :k RETURNING *;
INSERT INTO job_events (job_id, attempt_id, kind, detail, at) SELECT id, NULL, 'attempt_created', '{"number": 1, "provider": "upstream", "reason": "initial"}'::jsonb, now() FROM jobs WHERE owner_id = 'bench' AND idempotency_key = :client_id || '-' || :k;
COMMIT;
"""
