"""A PostgreSQL cluster of the volume benchmark's own, and the jobs it is filled with.

The jobs are generated in SQL (``generate_series``, a few statements per million jobs),
not through the API: a job, its attempts and its audit events as the store writes them,
spread over ``SPAN`` (ids are ULIDs of their creation time, so retention's id bound works
on them). Some owners are large, many small; the last hour holds a share of jobs still
queued, running or unknown. When attempts, events and shadow checks carry ``owner_id``
(the owner-keys migration), it is filled too.

During a fill the secondary indexes and the foreign keys of the filled tables are dropped
and built again after it from their own definitions (``pg_get_indexdef``,
``pg_get_constraintdef``); ``restore`` checks that the schema came back as it was.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

from bench.lib.children import say

VERSION = "15"  # Debian's PostgreSQL on this machine
SPAN = dt.timedelta(days=10)  # the jobs of the largest size are spread over it
RECENT = dt.timedelta(hours=1)  # jobs not settled yet are among the newest
CHUNK = 500_000  # jobs per INSERT ... SELECT
#: Disk one job takes, all told: its rows and their indexes (2.6 GB the million, measured),
#: the WAL of writing them, and what must stay free beside them.
BYTES_PER_JOB = 3_000
SPARE_BYTES = 5 * 2**30
FILLED = ("jobs", "attempts", "job_events")
#: The cluster's settings: PostgreSQL's defaults but for memory and WAL sized for a
#: 23 GB host and a load of millions of rows, and autovacuum on, as in production.
CLUSTER_SETTINGS = """
shared_buffers = 1GB
max_wal_size = 8GB
checkpoint_timeout = 15min
autovacuum = on
log_autovacuum_min_duration = 0
"""


def check_disk(path: str, jobs: int) -> dict[str, int]:
    """Refuse (SystemExit) when ``path``'s file system has too little room for ``jobs``."""
    free = shutil.disk_usage(path).free
    need = jobs * BYTES_PER_JOB + SPARE_BYTES
    if free < need:
        raise SystemExit(f"{path}: {free / 2**30:.1f} GiB free, {need / 2**30:.1f} GiB needed")
    return {"free_bytes": free, "needed_bytes": need}


@contextlib.contextmanager
def own_cluster(name: str, port: int, keep: bool) -> Iterator[str]:
    """Create and start a PostgreSQL cluster of its own; yield its libpq admin URL; stop
    and drop it afterwards unless ``keep``."""
    run = ["pg_createcluster", VERSION, name, "--port", str(port), "--", "--auth=trust"]
    subprocess.run(run, check=True, capture_output=True)
    try:
        conf = f"/etc/postgresql/{VERSION}/{name}/conf.d/90-volume.conf"
        with open(conf, "w", encoding="utf-8") as f:
            f.write(CLUSTER_SETTINGS)
        ctl = ["pg_ctlcluster", "--skip-systemctl-redirect", VERSION, name, "start"]
        subprocess.run(ctl, check=True)
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        if keep:
            say(f"kept the cluster {VERSION}/{name} on port {port}")
        else:
            subprocess.run(["pg_dropcluster", "--stop", VERSION, name], check=False)


#: The generator, created in the database filled (and dropped with it): ids, and one row
#: per job with what its other rows derive from.
FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION volume_c(v bigint, s int) RETURNS text IMMUTABLE LANGUAGE sql
AS $$ SELECT substr('0123456789ABCDEFGHJKMNPQRSTVWXYZ', ((v >> s) & 31)::int + 1, 1) $$;
CREATE OR REPLACE FUNCTION volume_ulid(ms bigint, r bigint) RETURNS text IMMUTABLE
LANGUAGE sql AS $$ SELECT volume_c(ms, 45) || volume_c(ms, 40) || volume_c(ms, 35)
 || volume_c(ms, 30) || volume_c(ms, 25) || volume_c(ms, 20) || volume_c(ms, 15)
 || volume_c(ms, 10) || volume_c(ms, 5) || volume_c(ms, 0) || '000000' || volume_c(r, 45)
 || volume_c(r, 40) || volume_c(r, 35) || volume_c(r, 30) || volume_c(r, 25)
 || volume_c(r, 20) || volume_c(r, 15) || volume_c(r, 10) || volume_c(r, 5)
 || volume_c(r, 0) $$;
CREATE OR REPLACE FUNCTION volume_jobs(lo bigint, hi bigint, total bigint, ends timestamp,
  step float8, recent bigint)
RETURNS TABLE (n bigint, t timestamp, ms bigint, job_id text, status text, owner text,
  provider text)
STABLE LANGUAGE sql AS $$
  SELECT g.n, a.t, (extract(epoch FROM a.t) * 1000)::bigint,
    'job_' || volume_ulid((extract(epoch FROM a.t) * 1000)::bigint, g.n * 8), b.st,
    CASE WHEN g.n % 10 < 6 THEN 'big-' || g.n % 3
         WHEN g.n % 10 < 9 THEN 'mid-' || g.n % 97 ELSE 'small-' || g.n % 9973 END,
    CASE WHEN g.n % 5 = 0 THEN 'sim-anthropic' ELSE 'sim-openai' END
  FROM generate_series(lo, hi) AS g(n),
  LATERAL (SELECT ends - make_interval(secs => (total - g.n) * step) AS t) AS a,
  LATERAL (SELECT CASE
    WHEN total - g.n < recent AND (g.n / 10) % 100 = 1 THEN 'queued'
    WHEN total - g.n < recent AND (g.n / 10) % 100 = 2 THEN 'running'
    WHEN total - g.n < recent AND (g.n / 10) % 100 = 3 THEN 'unknown'
    WHEN (g.n / 10) % 50 = 7 THEN 'failed'
    WHEN (g.n / 10) % 200 = 13 THEN 'cancelled'
    ELSE 'succeeded' END AS st) AS b
$$;
"""

JOBS = """
INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, contract, provider, input,
  status, version, completed_by, result, error, created_at, updated_at)
SELECT j.job_id, j.owner, 'order-' || j.n || '-' || left(md5(j.n::text), 12),
  md5(j.n::text) || md5(j.n::text || 'f'), 'ticket-triage@1', j.provider,
  jsonb_build_object('ticket_id', 'SUP-' || j.n,
    'channel', (ARRAY['email', 'chat', 'phone'])[j.n % 3 + 1],
    'customer', jsonb_build_object('name', 'Customer ' || j.n % 9973,
      'plan', (ARRAY['free', 'pro', 'enterprise'])[j.n % 3 + 1]),
    'subject', 'Charged twice for order ' || j.n,
    'body', 'My card was charged twice for March, order ' || j.n
      || '. I wrote to you last week and nobody answered; please refund one of them.'),
  j.status, CASE WHEN j.status IN ('queued', 'running', 'unknown') THEN 1 ELSE 2 END,
  CASE WHEN j.status = 'succeeded' THEN 'att_' || volume_ulid(j.ms, j.n * 8 + 1) END,
  CASE WHEN j.status = 'succeeded' THEN jsonb_build_object('category', 'billing',
    'priority', (ARRAY['low', 'normal', 'high'])[j.n % 3 + 1],
    'summary', 'Billing ticket from Customer ' || j.n % 9973 || ': charged twice',
    'needs_human', j.n % 2 = 0, 'language', 'en') END,
  CASE WHEN j.status = 'failed' THEN '{"outcome": "definite", "reason": "provider_error",
    "status": 500, "message": "the provider answered 500 twice"}'::jsonb END,
  j.t, j.t + interval '1.2 seconds'
FROM volume_jobs({args}) AS j
"""

ATTEMPTS = """
INSERT INTO attempts (id, job_id, number, provider, reason, state, read_version,
  lease_owner, lease_expires_at, deadline_at, downstream_key, provider_request_id,
  reported_model, error, created_at, started_at, finished_at, ready_at, waits{owner_col})
SELECT 'att_' || volume_ulid(j.ms, j.n * 8 + k.num), j.job_id, k.num,
  CASE WHEN k.num = 2 THEN 'sim-anthropic' ELSE j.provider END,
  CASE WHEN k.num = 2 THEN 'failover' ELSE 'initial' END,
  CASE j.status WHEN 'queued' THEN 'starting' ELSE j.status END,
  CASE WHEN j.status = 'queued' THEN NULL ELSE 1 END,
  CASE WHEN j.status = 'queued' THEN NULL ELSE 'gateway-' || j.n % 4 END,
  CASE WHEN j.status = 'queued' THEN NULL
       WHEN j.status = 'running' THEN now()::timestamp + interval '1 day'
       ELSE j.t + interval '30 seconds' END,
  CASE WHEN j.status = 'queued' THEN NULL
       WHEN j.status = 'running' THEN now()::timestamp + interval '1 day'
       ELSE j.t + interval '30 seconds' END,
  j.job_id || '/' || k.num,
  CASE WHEN j.status IN ('succeeded', 'failed') THEN 'req_' || md5(j.n::text || k.num) END,
  CASE WHEN j.status = 'succeeded' THEN 'gpt-4o-mini-2024-07-18' END,
  CASE j.status WHEN 'failed' THEN '{"outcome": "definite", "reason": "provider_error",
    "status": 500}'::jsonb WHEN 'unknown' THEN '{"outcome": "unknown",
    "reason": "timeout"}'::jsonb ELSE 'null'::jsonb END,
  j.t + (k.num - 1) * interval '1 second',
  CASE WHEN j.status = 'queued' THEN NULL ELSE j.t + interval '20 milliseconds' END,
  CASE WHEN j.status IN ('queued', 'running', 'unknown') THEN NULL
       ELSE j.t + interval '1.2 seconds' END,
  j.t, 0{owner_val}
FROM volume_jobs({args}) AS j,
  LATERAL generate_series(1, CASE WHEN j.status = 'failed' THEN 2 ELSE 1 END) AS k(num)
"""

#: The events a job in each status has, each with its attempt's number (0: the job's own).
EVENTS = """
INSERT INTO job_events (job_id, attempt_id, kind, detail, at{owner_col})
SELECT j.job_id,
  CASE WHEN e.num > 0 THEN 'att_' || volume_ulid(j.ms, j.n * 8 + e.num) END,
  e.kind, jsonb_build_object('number', e.num, 'provider', j.provider),
  j.t + e.k * interval '300 milliseconds'{owner_val}
FROM volume_jobs({args}) AS j,
  LATERAL unnest(
    CASE j.status
      WHEN 'succeeded' THEN ARRAY['job_created', 'attempt_created', 'attempt_running',
        'attempt_succeeded']
      WHEN 'failed' THEN ARRAY['job_created', 'attempt_created', 'attempt_running',
        'attempt_failed', 'attempt_created', 'attempt_running', 'attempt_failed']
      WHEN 'cancelled' THEN ARRAY['job_created', 'attempt_created', 'job_cancelled']
      WHEN 'queued' THEN ARRAY['job_created', 'attempt_created']
      WHEN 'running' THEN ARRAY['job_created', 'attempt_created', 'attempt_running']
      ELSE ARRAY['job_created', 'attempt_created', 'attempt_running', 'attempt_unknown']
    END,
    CASE j.status WHEN 'failed' THEN ARRAY[0, 1, 1, 1, 2, 2, 2] ELSE ARRAY[0, 1, 1, 1] END
  ) WITH ORDINALITY AS e(kind, num, k)
WHERE e.kind IS NOT NULL
"""


#: The fill's own session: no wait for each commit's flush, and no JIT compilation (3 s
#: a statement, for nothing the hot paths' plans would ever use).
FILL_SESSION = "SET synchronous_commit = off;\nSET jit = off;\n"


def psql(url: str, sql: str, *, quiet: bool = True) -> str:
    """Run ``sql`` with psql (stops at the first error); return what it printed."""
    args = ["psql", url, "-v", "ON_ERROR_STOP=1", "-X", "-At"] + (["-q"] if quiet else [])
    done = subprocess.run(args, input=sql, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def owner_columns(url: str) -> list[str]:
    """The filled tables besides ``jobs`` that have an ``owner_id`` column."""
    rows = psql(
        url,
        "SELECT table_name FROM information_schema.columns WHERE column_name = 'owner_id'"
        " AND table_schema = 'public' AND table_name IN ('attempts', 'job_events')",
    )
    return sorted(rows.split()) if rows else []


def schema_of(url: str) -> list[str]:
    """The filled tables' indexes and constraints, as PostgreSQL spells them."""
    tables = ", ".join(f"'{t}'" for t in FILLED)
    rows = psql(
        url,
        f"SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid::regclass::text"
        f" IN ({tables}) UNION ALL SELECT conrelid::regclass || ' ' || conname || ' '"
        f" || pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid::regclass::text"
        f" IN ({tables})",
    )
    return sorted(rows.splitlines())


def loosen(url: str) -> list[str]:
    """Drop the filled tables' foreign keys and their indexes that back no constraint;
    return the statements that build them again.

    Partial indexes stay: they hold a few rows (the claim queue), and one built again from
    its deparsed predicate (``state = ANY (ARRAY[...::text])``) is no longer spelled as
    the statements that must prove they match it."""
    tables = ", ".join(f"'{t}'" for t in FILLED)
    rows = psql(
        url,
        f"SELECT 'ALTER TABLE ' || conrelid::regclass || ' ADD CONSTRAINT ' || conname || ' '"
        f" || pg_get_constraintdef(oid) || E'\\x1f' || 'ALTER TABLE ' || conrelid::regclass"
        f" || ' DROP CONSTRAINT ' || conname FROM pg_constraint WHERE contype = 'f'"
        f" AND conrelid::regclass::text IN ({tables})"
        f" UNION ALL SELECT pg_get_indexdef(i.indexrelid) || E'\\x1f' || 'DROP INDEX '"
        f" || i.indexrelid::regclass FROM pg_index AS i WHERE i.indrelid::regclass::text"
        f" IN ({tables}) AND i.indpred IS NULL AND NOT EXISTS (SELECT 1 FROM pg_constraint AS c"
        f" WHERE c.conindid = i.indexrelid)",
    )
    pairs = [line.split("\x1f") for line in rows.splitlines()]
    psql(url, ";\n".join(drop for _, drop in pairs) + ";")
    return [build for build, _ in pairs]


def restore(url: str, builds: list[str], before: list[str]) -> float:
    """Build the indexes and foreign keys again; return the seconds it took. Raise if
    the schema is not what it was before ``loosen``."""
    began = time.monotonic()
    psql(url, "SET maintenance_work_mem = '1GB';\n" + ";\n".join(builds) + ";")
    after = schema_of(url)
    if after != before:
        raise SystemExit(f"the schema changed in the fill:\n{before}\n{after}")
    return time.monotonic() - began


def fill(url: str, lo: int, hi: int, total: int, ends: dt.datetime) -> dict[str, Any]:
    """Insert jobs ``lo``..``hi`` of ``total`` (the newest created just before ``ends``),
    with their attempts and events; return rows and seconds per table."""
    step = SPAN.total_seconds() / total
    recent = int(RECENT.total_seconds() / step)
    owned = owner_columns(url)
    psql(url, FUNCTIONS)
    before = schema_of(url)
    builds = loosen(url)
    out: dict[str, Any] = {"jobs": lo, "to": hi, "tables": {t: [0, 0.0] for t in FILLED}}
    began = time.monotonic()
    for first in range(lo, hi + 1, CHUNK):
        last = min(hi, first + CHUNK - 1)
        args = f"{first}, {last}, {total}, '{ends.isoformat()}', {step}, {recent}"
        for table, template in zip(FILLED, (JOBS, ATTEMPTS, EVENTS), strict=True):
            own = table in owned
            sql = (
                template.replace("{args}", args)
                .replace("{owner_col}", ", owner_id" if own else "")
                .replace("{owner_val}", ", j.owner" if own else "")
            )
            t0 = time.monotonic()
            done = psql(url, FILL_SESSION + sql, quiet=False)
            rows = int(done.split()[-1])
            took = time.monotonic() - t0
            out["tables"][table][0] += rows
            out["tables"][table][1] += took
            say(f"  {table}: {rows} rows in {took:.1f} s ({rows / took:,.0f} rows/s)")
        say(f"  jobs {first:,}..{last:,} of {hi:,} ({time.monotonic() - began:.0f} s)")
    out["insert_s"] = round(time.monotonic() - began, 1)
    out["index_s"] = round(restore(url, builds, before), 1)
    say(f"  indexes and foreign keys built again in {out['index_s']} s")
    t0 = time.monotonic()
    psql(url, "VACUUM (ANALYZE) jobs, attempts, job_events;\nCHECKPOINT;")
    out["vacuum_s"] = round(time.monotonic() - t0, 1)
    out["owner_id_filled_in"] = owned
    return out


def sizes(url: str) -> dict[str, int]:
    """Bytes of the database and of each filled table with its indexes."""
    tables = ", ".join(f"pg_total_relation_size('{t}')" for t in FILLED)
    row = psql(url, f"SELECT pg_database_size(current_database()), {tables}").split("|")
    return dict(zip(("database", *FILLED), map(int, row), strict=True))
