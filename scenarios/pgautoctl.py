"""What pg_auto_failover is told and asked: pg_autoctl command lines, monitor SQL, states.

Debian packages it as ``postgresql-<major>-auto-failover`` (the monitor's extension and
``pg_autoctl``, which ``pg-auto-failover-cli`` brings along). Loopback-only test settings:
every node is created with ``--hostname 127.0.0.1 --listen 127.0.0.1`` (without a
hostname pg_autoctl probes the network by connecting to 8.8.8.8:53), ``--auth trust``
(initdb's default pg_hba.conf already trusts 127.0.0.1 and the Unix socket, so
``--skip-pg-hba`` is not needed) and ``--no-ssl --ssl-mode disable``.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import asyncpg

from scenarios.pgprocesses import Node

MONITOR_DB = "pg_auto_failover"
FORMATION = "default"
CONNECT_TIMEOUT = 2.0  # seconds to open a connection to one node, or to run one query
# pg_autoctl appends its own tuning to each node's configuration, shared_buffers at a
# quarter of the RAM (6 GB here) per node; postgresql.auto.conf is read last and wins.
SHARED_BUFFERS = "128MB"
#: The states in which a node is the one primary of its group (it may take writes).
PRIMARY_STATES = frozenset({"single", "wait_primary", "primary", "join_primary", "apply_settings"})

STATES_QUERY = (
    "SELECT nodename, nodeport, reportedstate::text AS reported, goalstate::text AS assigned,"
    " health, reportedpgisrunning FROM pgautofailover.node"
    f" WHERE formationid = '{FORMATION}' ORDER BY nodename"
)
SETTINGS_QUERY = (
    "SELECT current_setting('synchronous_standby_names') AS synchronous_standby_names,"
    " current_setting('synchronous_commit') AS synchronous_commit,"
    " current_setting('default_transaction_read_only') AS default_transaction_read_only,"
    " pg_is_in_recovery()::text AS in_recovery"
)
EXTENSION_QUERY = "SELECT 1 FROM pg_extension WHERE extname = 'pgautofailover'"


@dataclasses.dataclass(frozen=True, slots=True)
class FailoverTiming:
    """How fast the monitor declares a node dead and promotes a standby."""

    health_check_period: int = 1000  # milliseconds between two health checks of a node
    health_check_timeout: int = 1000  # milliseconds a health check may take to connect
    health_check_max_retries: int = 1  # retries of a failed health check
    health_check_retry_delay: int = 200  # milliseconds between those retries
    node_considered_unhealthy_timeout: int = 2000  # milliseconds without a keeper report
    primary_demote_timeout: int = 2000  # milliseconds given to the old primary to demote
    startup_grace_period: int = 1000  # milliseconds after the monitor starts, no failover
    # The keepers' own: seconds a primary that reaches neither the monitor nor a standby
    # waits before it demotes itself. Keep it near primary_demote_timeout, or a primary cut
    # off the network may take writes while its standby is already promoted.
    network_partition_timeout: int = 2

    def monitor_statements(self) -> list[str]:
        """Return the SQL that sets the monitor's GUCs (all reloadable) and reloads."""
        values = dataclasses.asdict(self)
        values.pop("network_partition_timeout")
        sets = [f"ALTER SYSTEM SET pgautofailover.{k} = {int(v)}" for k, v in values.items()]
        return [*sets, "SELECT pg_reload_conf()"]


#: Timings that fail over within seconds on a loopback test cluster.
FAST = FailoverTiming()
#: pg_auto_failover 2.0's own values, for comparison runs.
DEFAULT_TIMING = FailoverTiming(5000, 5000, 2, 2000, 20000, 30000, 10000, 20)


@dataclasses.dataclass(frozen=True, slots=True)
class NodeState:
    """One data node as the monitor sees it."""

    name: str
    port: int
    reported: str  #: the state its keeper last reported
    assigned: str  #: the goal state the monitor assigned
    healthy: bool  #: its last health check by the monitor succeeded
    pg_running: bool  #: its keeper last reported Postgres as running

    @property
    def is_primary(self) -> bool:
        """Say whether the node is the primary, as reported and as assigned."""
        return self.reported in PRIMARY_STATES and self.assigned in PRIMARY_STATES

    def settled_in(self, state: str) -> bool:
        """Say whether the node reported the state and is assigned nothing else."""
        return self.reported == self.assigned == state


def stable_primary(states: list[NodeState]) -> str | None:
    """Return the primary if one is settled and every other node is a secondary."""
    primaries = [s.name for s in states if s.settled_in("primary")]
    secondaries = [s for s in states if s.settled_in("secondary")]
    settled = len(primaries) == 1 and len(primaries) + len(secondaries) == len(states)
    return primaries[0] if settled and any(s.healthy for s in secondaries) else None


def primary_other_than(states: list[NodeState], name: str | None) -> str | None:
    """Return the primary unless it is the named node (None: no such primary)."""
    return next((s.name for s in states if s.is_primary and s.name != name), None)


def settled(states: list[NodeState], name: str, state: str) -> NodeState | None:
    """Return the named node if it has settled in the state."""
    return next((s for s in states if s.name == name and s.settled_in(state)), None)


def pg_bindir() -> Path | None:
    """Return the newest PostgreSQL bin directory that has pg_auto_failover's extension."""
    majors = [p for p in Path("/usr/lib/postgresql").glob("*") if p.name.isdigit()]
    for major in sorted(majors, key=lambda p: int(p.name), reverse=True):
        control = Path(f"/usr/share/postgresql/{major.name}/extension/pgautofailover.control")
        if (major / "bin" / "pg_ctl").is_file() and control.is_file():
            return major / "bin"
    return None


def pg_autoctl() -> str | None:
    """Return the pg_autoctl executable, or None when it is not installed."""
    return shutil.which("pg_autoctl") or shutil.which("pg_autoctl", path="/usr/bin")


def initdb_argv(bindir: Path, pgdata: Path) -> list[str]:
    """Return the initdb command for a node (trust auth, no fsync: a throwaway cluster)."""
    options = "-U postgres --auth trust -E UTF8 --no-locale --no-sync".split()
    return [str(bindir / "initdb"), "-D", str(pgdata), *options]


#: Every node listens on 127.0.0.1 only, trusts loopback and speaks no TLS.
LOOPBACK_OPTIONS = (
    "--hostname 127.0.0.1 --listen 127.0.0.1 --auth trust --no-ssl --ssl-mode disable"
)


def monitor_uri(port: int) -> str:
    """Return the URI the keepers use to reach the monitor."""
    return f"postgres://autoctl_node@127.0.0.1:{port}/{MONITOR_DB}?sslmode=disable"


def create_argv(
    autoctl: str, bindir: Path, node: Node, monitor_port: int | None, dbname: str
) -> list[str]:
    """Return the command that creates a monitor (no monitor_port) or a node, then runs it."""
    kind = "postgres" if monitor_port else "monitor"
    argv = [autoctl, "create", kind, "--pgdata", str(node.pgdata), "--pgport", str(node.port)]
    argv += [*LOOPBACK_OPTIONS.split(), "--pgctl", str(bindir / "pg_ctl"), "--run"]
    if monitor_port:
        argv += ["--name", node.name, "--dbname", dbname, "--monitor", monitor_uri(monitor_port)]
    return argv


def run_argv(autoctl: str, pgdata: Path) -> list[str]:
    """Return the command that runs an existing node again."""
    return [autoctl, "run", "--pgdata", str(pgdata)]


def partition_timeout_argv(autoctl: str, pgdata: Path, seconds: int) -> list[str]:
    """Return the command that sets a keeper's network partition timeout (it reloads)."""
    setting = ["timeout.network_partition_timeout", str(seconds)]
    return [autoctl, "config", "set", "--pgdata", str(pgdata), *setting]


def switchover_argv(autoctl: str, monitor_pgdata: Path, wait: float) -> list[str]:
    """Return the command that performs a switchover and waits for it (whole seconds)."""
    options = ["--formation", FORMATION, "--wait", str(max(1, int(wait)))]
    return [autoctl, "perform", "switchover", "--pgdata", str(monitor_pgdata), *options]


def number_sync_standbys_statement(count: int) -> str:
    """Return the monitor SQL that sets the formation's number_sync_standbys."""
    return f"SELECT pgautofailover.set_formation_number_sync_standbys('{FORMATION}', {int(count)})"


async def connect(port: int, database: str) -> asyncpg.Connection:
    """Open a trust-auth connection as postgres to one loopback port."""
    return await asyncpg.connect(
        host="127.0.0.1",
        port=port,
        user="postgres",
        database=database,
        timeout=CONNECT_TIMEOUT,
    )


async def fetch(port: int, database: str, query: str) -> list[asyncpg.Record]:
    """Run one query on one node and return its rows."""
    conn = await connect(port, database)
    try:
        return list(await conn.fetch(query, timeout=CONNECT_TIMEOUT))
    finally:
        await conn.close()


async def execute(port: int, database: str, *statements: str) -> None:
    """Run statements one after the other on one node."""
    conn = await connect(port, database)
    try:
        for statement in statements:
            await conn.execute(statement, timeout=CONNECT_TIMEOUT)
    finally:
        await conn.close()


async def monitor_ready(monitor_port: int) -> bool | None:
    """Return True once the monitor's extension exists (None before)."""
    return bool(await fetch(monitor_port, MONITOR_DB, EXTENSION_QUERY)) or None


async def monitor_states(monitor_port: int) -> list[NodeState]:
    """Return every data node's state from the monitor, by name."""
    rows = await fetch(monitor_port, MONITOR_DB, STATES_QUERY)
    return [
        NodeState(
            r["nodename"],
            r["nodeport"],
            r["reported"],
            r["assigned"],
            r["health"] == 1,
            bool(r["reportedpgisrunning"]),
        )
        for r in rows
    ]
