"""A real PostgreSQL primary/standby cluster on loopback, run by pg_auto_failover.

One monitor and N data nodes, each a ``pg_autoctl`` process tree we own, each Postgres on
its own free 127.0.0.1 port with trust auth, in a fresh directory owned by ``postgres``
(PostgreSQL refuses to run as root). Every wait polls and is bounded; ``stop()`` ends every
process it started or that those started, also after a start that failed halfway.

A SIGKILL of the primary's postmaster alone is no clean test of a failover: pg_autoctl's
controller restarts Postgres, but in pg_auto_failover 2.0 the keeper first spends about
3 s retrying its local connection and then reports Postgres "not running", which the
monitor takes for an unhealthy primary at once: it fails over (with its default timings
too), while the restarted old primary may still take a write or two before it is demoted
and rewound. ``kill_primary()`` therefore crashes the whole node, postmaster and pg_autoctl
frozen then SIGKILLed together as when a host dies: health checks fail, no keeper reports,
and the monitor promotes the standby once its timeouts (``FailoverTiming``) run out.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import asyncpg

from scenarios import pgautoctl as ctl
from scenarios import pgprocesses as procs
from scenarios.harness import free_port, log_tail
from scenarios.pgautoctl import FAST, FailoverTiming, NodeState
from scenarios.pgprocesses import Node, PgClusterError

__all__ = ["FailoverTiming", "NodeState", "PgAutoFailoverCluster", "PgClusterError"]

RUN_AS = "postgres"  # the OS user every cluster process runs as when we are root
START_TIMEOUT = 120.0  # seconds the whole cluster may take to start
STABLE_TIMEOUT = 60.0  # seconds the waits wait by default
STOP_GRACE = 10.0  # seconds between SIGTERM and SIGKILL when stopping
COMMAND_TIMEOUT = 60.0  # seconds a one-shot command (initdb, pg_autoctl config) may take
POLL = 0.1  # seconds between two looks at the monitor
CHECKPOINT_NUDGE = 1.0  # seconds between CHECKPOINTs on the primary while standbys clone it
_DB_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_UNREACHABLE = (OSError, asyncpg.PostgresError, TimeoutError)
T = TypeVar("T")


def _stderr(line: str) -> None:
    print(f"pgcluster: {line}", file=sys.stderr, flush=True)


class PgAutoFailoverCluster:
    """A pg_auto_failover monitor and N data nodes on loopback, started and stopped whole."""

    def __init__(
        self,
        nodes: int = 2,
        *,
        number_sync_standbys: int | None = None,
        dbname: str = "onejob",
        timing: FailoverTiming = FAST,
        base_dir: Path | None = None,
        start_timeout: float = START_TIMEOUT,
        progress: Callable[[str], None] | None = _stderr,
        ports: list[int] | None = None,
    ) -> None:
        if nodes < 2 or not _DB_NAME.match(dbname):
            raise ValueError("a cluster needs 2 nodes or more and a plain database name")
        self.number_sync_standbys = number_sync_standbys  # None: pg_auto_failover's default
        self.dbname = dbname
        self.timing = timing
        self.start_timeout = start_timeout  # seconds
        self._progress = progress
        self._base = base_dir or Path(tempfile.gettempdir())
        self._dir: Path | None = None
        ports = ports or [free_port() for _ in range(nodes + 1)]  # the monitor's, then nodes'
        if len(ports) != nodes + 1:
            raise ValueError(f"{nodes} nodes need {nodes + 1} ports, the monitor's first")
        self._monitor = Node("monitor", ports[0])
        self._nodes = [Node(f"node{i}", ports[i]) for i in range(1, nodes + 1)]
        self._autoctl = ctl.pg_autoctl() or ""
        self._bindir = ctl.pg_bindir() or Path()
        self._procs: procs.OwnedProcesses | None = None
        self._started_at = time.monotonic()

    async def __aenter__(self) -> PgAutoFailoverCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def directory(self) -> Path | None:
        """Return the cluster's directory while it exists."""
        return self._dir

    @property
    def node_names(self) -> list[str]:
        """Return the data nodes' names, node1 first."""
        return [n.name for n in self._nodes]

    @property
    def node_urls(self) -> dict[str, str]:
        """Return each data node's own SQLAlchemy URL (asyncpg driver)."""
        return {
            n.name: f"postgresql+asyncpg://postgres@127.0.0.1:{n.port}/{self.dbname}"
            for n in self._nodes
        }

    @property
    def multi_host_url(self) -> str:
        """Return the SQLAlchemy URL that reaches whichever node takes writes now."""
        return self.multi_host_url_for(self.dbname)

    def multi_host_url_for(self, database: str) -> str:
        """Return the multi-host SQLAlchemy URL of another database of the cluster."""
        hosts = "&".join(f"host=127.0.0.1:{n.port}" for n in self._nodes)
        return f"postgresql+asyncpg://postgres@/{database}?{hosts}&target_session_attrs=read-write"

    @property
    def multi_host_dsn(self) -> str:
        """Return the libpq/asyncpg DSN that reaches whichever node takes writes now."""
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in self._nodes)
        return f"postgresql://postgres@{hosts}/{self.dbname}?target_session_attrs=read-write"

    async def start(self) -> None:
        """Create the monitor and the nodes, run them, and wait until replication is on."""
        self._started_at = time.monotonic()
        deadline = self._started_at + self.start_timeout
        try:
            owned = self._create_directory()
            first = self._nodes[0]
            await asyncio.gather(*(self._initdb(owned, n) for n in (self._monitor, first)))
            await self._spawn(self._monitor, self._create_argv(self._monitor))
            await self._wait(self._monitor_ready, deadline, "the monitor", self._monitor)
            await ctl.execute(self._monitor.port, ctl.MONITOR_DB, *self.timing.monitor_statements())
            await self._spawn(first, self._create_argv(first))
            await self._wait(self._first_is_single, deadline, "node1 single", first)
            await self._checkpoint(first.port)
            for node in self._nodes[1:]:
                await self._spawn(node, self._create_argv(node))
            await self._wait_stable(deadline, nudge=True)
            for node in self._nodes:
                seconds = self.timing.network_partition_timeout
                argv = ctl.partition_timeout_argv(self._autoctl, node.pgdata, seconds)
                await owned.command(argv, COMMAND_TIMEOUT)
            if self.number_sync_standbys is not None:
                statement = ctl.number_sync_standbys_statement(self.number_sync_standbys)
                await ctl.execute(self._monitor.port, ctl.MONITOR_DB, statement)
                await self._wait_stable(deadline)
            self._say(f"stable after {time.monotonic() - self._started_at:.1f} s")
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """End every process of the cluster (SIGTERM, then SIGKILL), free its IPC, rm -rf."""
        if self._dir is None or self._procs is None:
            return
        owned, left = self._procs, set[int]()
        try:
            for group in (self._nodes, [self._monitor]):  # the monitor last: keepers report
                up = [n for n in group if n.up]
                for node in up:
                    node.wanted = False
                    owned.remember_ipc([node.pgdata], self._tree(node))
                await procs.terminate([n.proc.pid for n in up if n.proc], STOP_GRACE)
            pgdatas = [n.pgdata for n in (self._monitor, *self._nodes)]
            left = await owned.sweep(self._dir, pgdatas, STOP_GRACE)
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._say(f"stopped; {self._dir} removed")
            self._dir = self._procs = None
        if left:
            raise PgClusterError(f"processes outlived SIGKILL: {sorted(left)}")

    async def states(self) -> list[NodeState]:
        """Return every data node's state from the monitor, by name."""
        return await ctl.monitor_states(self._monitor.port)

    async def primary(self) -> str | None:
        """Return the node that is primary now (reported and assigned), or None."""
        return ctl.primary_other_than(await self.states(), None)

    async def wait_until_stable(self, timeout: float = STABLE_TIMEOUT) -> str:
        """Wait for one primary and every running node secondary; return the primary."""
        return await self._wait_stable(time.monotonic() + timeout)

    async def wait_until(
        self, check: Callable[[list[NodeState]], T | None], timeout: float, what: str
    ) -> T:
        """Poll the monitor until check(states) returns something; return that."""

        async def probe() -> T | None:
            return check(await self.states())

        return await self._wait(probe, time.monotonic() + timeout, what)

    async def wait_for_primary(
        self, timeout: float = STABLE_TIMEOUT, *, other_than: str | None = None
    ) -> str:
        """Wait until a node other than other_than is primary; return its name."""
        what = f"a primary other than {other_than}"
        return await self.wait_until(lambda s: ctl.primary_other_than(s, other_than), timeout, what)

    async def wait_for_state(
        self, name: str, state: str, timeout: float = STABLE_TIMEOUT
    ) -> NodeState:
        """Wait until a node has reported the state and is assigned nothing else."""
        what = f"{name} {state}"
        return await self.wait_until(lambda s: ctl.settled(s, name, state), timeout, what)

    async def kill_primary(self) -> str:
        """Crash the primary's node (postmaster and pg_autoctl, SIGKILL); return its name."""
        name = await self.primary()
        if name is None:
            raise PgClusterError("no primary to kill")
        await self.crash_node(name)
        return name

    async def crash_node(self, name: str) -> None:
        """Freeze and SIGKILL a node's postmaster and whole pg_autoctl tree at once."""
        node, owned = self._node(name), self._owned()
        node.wanted = False
        pids = self._tree(node)
        owned.remember_ipc([node.pgdata], pids)
        if await procs.kill_now(pids, STOP_GRACE):
            raise PgClusterError(f"{name} outlived SIGKILL")
        if node.proc is not None:
            await asyncio.wait_for(node.proc.wait(), STOP_GRACE)
        self._say(f"{name} crashed ({len(pids)} processes SIGKILLed)")

    async def kill_postmaster(self, name: str) -> int:
        """SIGKILL a node's postmaster only (pg_autoctl restarts it); return its pid."""
        node = self._node(name)
        pid = procs.postmaster_pid(node.pgdata)
        if pid is None:
            raise PgClusterError(f"{name} has no running postmaster")
        self._owned().remember_ipc([node.pgdata], [])
        os.kill(pid, signal.SIGKILL)
        self._say(f"{name}: postmaster {pid} SIGKILLed")
        return pid

    async def stop_node(self, name: str) -> None:
        """Stop a node's pg_autoctl with SIGTERM (it stops its Postgres first)."""
        node = self._node(name)
        node.wanted = False
        if node.proc is not None and node.up:
            self._owned().remember_ipc([node.pgdata], self._tree(node))
            await procs.terminate([node.proc.pid], STOP_GRACE)
            await procs.terminate(self._tree(node), STOP_GRACE)
            await asyncio.wait_for(node.proc.wait(), STOP_GRACE)
        self._say(f"{name} stopped")

    async def start_node(self, name: str) -> None:
        """Run a stopped or crashed node again; it rejoins as a standby (pg_rewind)."""
        node = self._node(name)
        node.wanted = True
        if not node.up:
            await self._spawn(node, ctl.run_argv(self._autoctl, node.pgdata))

    async def switchover(self, timeout: float = STABLE_TIMEOUT) -> str:
        """Run ``pg_autoctl perform switchover``, wait until stable; return the new primary."""
        old = await self.primary()
        deadline = time.monotonic() + timeout
        argv = ctl.switchover_argv(self._autoctl, self._monitor.pgdata, timeout)
        await self._owned().command(argv, timeout)
        new = await self._wait_stable(deadline)
        if new == old:
            raise PgClusterError(f"switchover kept {old} as primary")
        return new

    async def synchronous_standby_names(self) -> str:
        """Return synchronous_standby_names on the current primary."""
        return (await self.replication_settings())["synchronous_standby_names"]

    async def replication_settings(self, name: str | None = None) -> dict[str, str]:
        """Return a node's (default: the primary's) replication settings and role."""
        name = name or await self.primary()
        if name is None:
            raise PgClusterError("no primary right now")
        rows = await ctl.fetch(self._node(name).port, self.dbname, ctl.SETTINGS_QUERY)
        return dict(rows[0])

    async def create_database(self, name: str) -> None:
        """Create a database on the primary (it replicates to the standbys)."""
        if not _DB_NAME.match(name):
            raise ValueError(f"not a plain database name: {name!r}")
        primary = await self.primary()
        if primary is None:
            raise PgClusterError("no primary right now")
        await ctl.execute(self._node(primary).port, "postgres", f'CREATE DATABASE "{name}"')

    # -- start-up steps --------------------------------------------------------------------

    def _create_directory(self) -> procs.OwnedProcesses:
        if not self._autoctl or self._bindir == Path():
            raise PgClusterError("pg_autoctl is not installed (postgresql-N-auto-failover)")
        user = RUN_AS if os.geteuid() == 0 else None
        owned = procs.OwnedProcesses.in_new_directory(self._base, "onejob-pgcluster-", user)
        self._procs, self._dir = owned, owned.cwd
        for node in (self._monitor, *self._nodes):
            node.pgdata = owned.cwd / node.name
            node.log = owned.cwd / "logs" / f"{node.name}.log"
        ports = [n.port for n in (self._monitor, *self._nodes)]
        self._say(f"directory {owned.cwd}, ports (monitor first) {ports}")
        return owned

    async def _initdb(self, owned: procs.OwnedProcesses, node: Node) -> None:
        await owned.command(ctl.initdb_argv(self._bindir, node.pgdata), COMMAND_TIMEOUT)
        with (node.pgdata / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"shared_buffers = '{ctl.SHARED_BUFFERS}'\n")

    def _create_argv(self, node: Node) -> list[str]:
        monitor = None if node is self._monitor else self._monitor.port
        return ctl.create_argv(self._autoctl, self._bindir, node, monitor, self.dbname)

    async def _monitor_ready(self) -> bool | None:
        return await ctl.monitor_ready(self._monitor.port)

    async def _first_is_single(self) -> bool | None:
        return any(s.settled_in("single") for s in await self.states()) or None

    async def _checkpoint(self, port: int) -> None:
        # pg_basebackup asks for a spread checkpoint: after initdb it takes over a minute.
        await ctl.execute(port, "postgres", "CHECKPOINT")

    async def _wait_stable(self, deadline: float, nudge: bool = False) -> str:
        last_nudge = 0.0

        async def stable() -> str | None:
            nonlocal last_nudge
            wanted = {n.name for n in self._nodes if n.wanted}
            states = [s for s in await self.states() if s.name in wanted]
            if nudge and time.monotonic() - last_nudge > CHECKPOINT_NUDGE:
                last_nudge = time.monotonic()
                for state in (s for s in states if s.is_primary):
                    try:
                        await self._checkpoint(state.port)
                    except _UNREACHABLE:
                        pass  # a restarting primary: the next nudge will do
            return ctl.stable_primary(states)

        return await self._wait(stable, deadline, "one primary, the other nodes secondary")

    async def _wait(
        self,
        check: Callable[[], Awaitable[T | None]],
        deadline: float,
        what: str,
        node: Node | None = None,
    ) -> T:
        """Poll check until it returns a value; fail early if a wanted pg_autoctl died."""
        watched = (node,) if node else (self._monitor, *self._nodes)
        while True:
            for n in watched:
                if n.wanted and n.proc is not None and not n.up:
                    raise PgClusterError(
                        f"{n.name}'s pg_autoctl exited with {n.proc.returncode} while waiting "
                        f"for {what}; {n.log} ends with:\n{log_tail(n.log)}"
                    )
            try:
                if (value := await check()) is not None:
                    self._say(f"{what}: reached")
                    return value
            except _UNREACHABLE:
                pass  # the monitor may be starting or restarting: ask again
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {n.log}:\n{log_tail(n.log, 1500)}" for n in watched)
                raise PgClusterError(f"timed out waiting for {what}\n{tails}")
            await asyncio.sleep(POLL)

    # -- processes -----------------------------------------------------------------------------

    def _owned(self) -> procs.OwnedProcesses:
        if self._procs is None or self._dir is None:
            raise PgClusterError("the cluster is not running")
        return self._procs

    async def _spawn(self, node: Node, argv: list[str]) -> None:
        node.proc = await self._owned().spawn(argv, node.log)
        self._say(f"{node.name}: {' '.join(argv[1:3])} (pid {node.proc.pid}, port {node.port})")

    def _tree(self, node: Node) -> set[int]:
        return self._owned().tree(node)

    def _node(self, name: str) -> Node:
        return {n.name: n for n in self._nodes}[name]

    def _say(self, line: str) -> None:
        if self._progress is not None:
            self._progress(f"+{time.monotonic() - self._started_at:.1f}s {line}")
