"""Scenario 17: the database partition of scenario 13 with PgBouncer in front of PostgreSQL.

PgBouncer runs beside the database in transaction mode (``scenarios.pgbouncer``, its waits
as docs/operations.md sets them, "Behind PgBouncer"), and the gateway, in its network
namespace, reaches it with ``[database] pooler = "transaction"`` and no ``listen_url``
(other processes' changes found by polling). The cuts drop every packet between the
gateway and PgBouncer, 20 s then 40 s, under the same load. Connections the gateway gave
up on while the network was silent stay open on PgBouncer's side until its keepalives or
``idle_transaction_timeout`` drop them.

What must hold is scenario 13's: every request answered within the database deadline
plus a second (a ``Prefer: wait`` one within its wait on top), only with 201, 200 or 503;
``/readyz`` 503 within 2 s of a cut and 200 within 2 s of a heal; the first
acknowledgement after a heal within 2 s; nothing acknowledged lost, a key never names two
jobs, no provider request sent twice, an attempt whose request never left never
``unknown``.
"""

from __future__ import annotations

from scenarios.breakpoints.database_partition import partitioned
from scenarios.context import ScenarioContext, ScenarioSkipped
from scenarios.harness import free_port
from scenarios.netpartition import NetPartition, missing_prerequisite
from scenarios.pgbouncer import pgbouncer_binary, start_pgbouncer
from scenarios.registry import scenario

NAME = "database-partition-pgbouncer"
SERVER_POOL = 20  # PgBouncer's server connections for the scenario's database
#: PgBouncer's own waits, as docs/operations.md ("Behind PgBouncer") sets them.
WAITS = {
    "query_wait_timeout": 5,
    "server_connect_timeout": 5,
    "server_check_delay": 5,
    "tcp_keepalive": 1,
    "tcp_keepidle": 5,
    "tcp_keepintvl": 2,
    "tcp_keepcnt": 3,
    "tcp_user_timeout": 5000,
    "idle_transaction_timeout": 10,
}


@scenario(
    NAME,
    "The database partition through PgBouncer in transaction mode: timely 503s, honest "
    "readiness, quick recovery, nothing lost or run twice",
    order=17,
    postgres_run_only=True,
    timeout=300.0,
)
async def database_partition_pgbouncer(ctx: ScenarioContext) -> None:
    """Cut the gateway's network to PgBouncer twice under load; check every answer."""
    why = missing_prerequisite()
    binary = pgbouncer_binary()
    if why or binary is None:
        raise ScenarioSkipped(why or "pgbouncer is not installed (apt-get install pgbouncer)")
    database_url = await ctx.fresh_db()
    directory = ctx.harness.work_dir / "pgbouncer"
    directory.mkdir(parents=True, exist_ok=True)
    bouncer = start_pgbouncer(binary, directory, database_url, SERVER_POOL, WAITS)
    try:
        sim_port = free_port()
        sim = await ctx.simulator(port=sim_port)
        ctx.note(
            f"PgBouncer 1.18 in transaction mode beside PostgreSQL ({SERVER_POOL} server "
            "connections; query_wait_timeout 5 s, server_connect_timeout 5 s, "
            "server_check_delay 5 s, keepalives, idle_transaction_timeout 10 s); the "
            'gateway with pooler = "transaction" and no listen_url; the cuts are between '
            "the gateway and PgBouncer"
        )
        net = await NetPartition.open()
        try:
            await partitioned(ctx, net, sim, sim_port, database_url, bouncer.url(database_url))
        finally:
            await net.close()
    finally:
        bouncer.stop()
