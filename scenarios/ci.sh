#!/usr/bin/env bash
# CI step: run every scenario on SQLite and on PostgreSQL, write the reports under
# reports/out/scenarios-{sqlite,postgresql}/ (each run under runs/<run id>/, the newest at
# latest/), print each summary; exit 1 if any scenario failed.
# Expects .venv (see .ci/run) and PostgreSQL at $ONEJOB_TEST_DATABASE_URL.
set -uo pipefail
cd "$(dirname "$0")/.."

ONEJOB=.venv/bin/onejob
PG_URL="${ONEJOB_TEST_DATABASE_URL:-postgresql+asyncpg://postgres@127.0.0.1:5432/test}"
OUT="${ONEJOB_REPORT_DIR:-reports/out}"
# The SQLite pass runs the PostgreSQL-only scenario (two gateways, one database) there too.
export ONEJOB_SCENARIO_POSTGRES_URL="$PG_URL"

# Scenario 10 needs a real nginx; it is SKIP (not PASS) without one.
if ! command -v nginx >/dev/null 2>&1 && ! test -x /usr/sbin/nginx; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx >/dev/null \
      || echo "scenarios/ci.sh: could not install nginx; load-balancer-retry will be SKIP" >&2
  fi
fi

status=0
for db in sqlite postgresql; do
  args=(scenarios run --report-dir "$OUT/scenarios-$db")
  if [ "$db" = postgresql ]; then
    args+=(--database-url "$PG_URL")
  fi
  echo "== scenarios on $db"
  start=$(date +%s)
  "$ONEJOB" "${args[@]}" || status=1
  echo "== scenarios on $db took $(( $(date +%s) - start )) s"
done
exit "$status"
