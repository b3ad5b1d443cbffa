"""A real pg_auto_failover cluster: acknowledged writes survive a crash and a switchover.

The cluster tests need ``pg_autoctl`` (Debian: postgresql-15-auto-failover) and root (the
cluster runs as the ``postgres`` OS user); they skip without them, and fail instead under
``ONEJOB_REQUIRE_POSTGRES=1``. Each prints what it measured: run with ``-s`` to see it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from scenarios import pgprocesses as procs
from scenarios.harness import free_port
from scenarios.pgautoctl import (
    DEFAULT_TIMING,
    FAST,
    NodeState,
    pg_autoctl,
    pg_bindir,
    stable_primary,
)
from scenarios.pgcluster import PgAutoFailoverCluster, PgClusterError

REQUIRE_PG = os.environ.get("ONEJOB_REQUIRE_POSTGRES") == "1"
FAILOVER_BUDGET = 20.0  # seconds a write may take to succeed again (goal: well under 10)
WRITE_TIMEOUT = 3.0  # seconds one write may take before the writer calls it failed
CREATE_TABLE = "CREATE TABLE acked (id text PRIMARY KEY, via text NOT NULL)"


def _missing() -> str | None:
    if pg_autoctl() is None or pg_bindir() is None:
        return "pg_autoctl is missing (apt-get install postgresql-15-auto-failover)"
    if os.geteuid() != 0:
        return "the cluster runs as the postgres OS user, which needs root"
    return None


@pytest.fixture
def cluster_tools() -> None:
    """Skip (or fail under ONEJOB_REQUIRE_POSTGRES=1) without pg_autoctl and root."""
    reason = _missing()
    if reason is not None:
        if REQUIRE_PG:
            pytest.fail(f"ONEJOB_REQUIRE_POSTGRES=1 but {reason}")
        pytest.skip(reason)


cluster_test = pytest.mark.usefixtures("cluster_tools")


@dataclasses.dataclass
class Writes:
    """What one writer sent through the multi-host URL and what the cluster acknowledged."""

    via: str
    acked: list[str] = dataclasses.field(default_factory=list)
    acked_at: list[float] = dataclasses.field(default_factory=list)  # monotonic seconds
    errors: list[tuple[float, str]] = dataclasses.field(default_factory=list)

    def first_ack_after(self, moment: float) -> float | None:
        """Return the first acknowledgement after the moment and after every error since."""
        last_error = max((t for t, _ in self.errors if t >= moment), default=moment)
        return next((t for t in self.acked_at if t > last_error), None)


async def write_with_asyncpg(dsn: str, writes: Writes, stop: asyncio.Event) -> None:
    """Insert rows on one connection, reconnecting through the multi-host DSN on errors."""
    conn: asyncpg.Connection | None = None
    while not stop.is_set():
        row = uuid.uuid4().hex
        try:
            if conn is None:
                conn = await asyncpg.connect(dsn, timeout=2.0)
            await conn.execute(
                "INSERT INTO acked VALUES ($1, $2)", row, writes.via, timeout=WRITE_TIMEOUT
            )
        except Exception as exc:  # every way a write can fail during a failover
            writes.errors.append((time.monotonic(), type(exc).__name__))
            if conn is not None:
                conn.terminate()
                conn = None
            await asyncio.sleep(0.02)
        else:
            writes.acked.append(row)
            writes.acked_at.append(time.monotonic())
        await asyncio.sleep(0.01)
    if conn is not None:
        await conn.close()


async def write_with_sqlalchemy(url: str, writes: Writes, stop: asyncio.Event) -> None:
    """Insert rows through a pooled SQLAlchemy engine built on the multi-host URL."""
    engine = create_async_engine(
        url, pool_pre_ping=True, connect_args={"timeout": 2.0, "command_timeout": WRITE_TIMEOUT}
    )
    try:
        while not stop.is_set():
            row = uuid.uuid4().hex
            try:
                async with asyncio.timeout(WRITE_TIMEOUT + 1), engine.begin() as conn:
                    insert = text("INSERT INTO acked VALUES (:id, :via)")
                    await conn.execute(insert, {"id": row, "via": writes.via})
            except Exception as exc:  # every way a write can fail during a failover
                writes.errors.append((time.monotonic(), type(exc).__name__))
                await asyncio.sleep(0.02)
            else:
                writes.acked.append(row)
                writes.acked_at.append(time.monotonic())
            await asyncio.sleep(0.01)
    finally:
        await engine.dispose()


@contextlib.asynccontextmanager
async def writers(cluster: PgAutoFailoverCluster) -> AsyncIterator[list[Writes]]:
    """Keep one asyncpg and one SQLAlchemy writer busy while the body runs."""
    conn = await asyncpg.connect(cluster.multi_host_dsn, timeout=5.0)
    await conn.execute(CREATE_TABLE)
    await conn.close()
    both = [Writes("asyncpg"), Writes("sqlalchemy")]
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(write_with_asyncpg(cluster.multi_host_dsn, both[0], stop)),
        asyncio.create_task(write_with_sqlalchemy(cluster.multi_host_url, both[1], stop)),
    ]
    try:
        yield both
    finally:
        stop.set()
        await asyncio.gather(*tasks)


async def until_both_write_again(both: list[Writes], since: float) -> list[float]:
    """Wait (bounded) until each writer has an acknowledgement after the moment."""
    deadline = time.monotonic() + FAILOVER_BUDGET + 10
    while time.monotonic() < deadline:
        firsts = [w.first_ack_after(since) for w in both]
        if all(t is not None for t in firsts):
            return [t - since for t in firsts if t is not None]
        await asyncio.sleep(0.05)
    pytest.fail(f"no write succeeded again: {[w.errors[-3:] for w in both]}")


async def rows_on(cluster: PgAutoFailoverCluster, name: str) -> set[str]:
    """Return every row id stored on one node."""
    port = make_url(cluster.node_urls[name]).port
    conn = await asyncpg.connect(
        host="127.0.0.1", port=port, user="postgres", database=cluster.dbname, timeout=5.0
    )
    try:
        return {r["id"] for r in await conn.fetch("SELECT id FROM acked")}
    finally:
        await conn.close()


def report(line: str) -> None:
    """Print one measurement (visible with pytest -s)."""
    print(f"\npgcluster measurement: {line}", file=sys.stderr)


# -- without a cluster ---------------------------------------------------------------------


def test_multi_host_url_lists_every_node_and_asks_for_a_writable_one() -> None:
    cluster = PgAutoFailoverCluster(3, ports=[5000, 5001, 5002, 5003], progress=None)
    assert cluster.multi_host_url == (
        "postgresql+asyncpg://postgres@/onejob?host=127.0.0.1:5001&host=127.0.0.1:5002"
        "&host=127.0.0.1:5003&target_session_attrs=read-write"
    )
    assert cluster.multi_host_dsn == (
        "postgresql://postgres@127.0.0.1:5001,127.0.0.1:5002,127.0.0.1:5003/onejob"
        "?target_session_attrs=read-write"
    )
    assert cluster.node_urls["node2"] == "postgresql+asyncpg://postgres@127.0.0.1:5002/onejob"


def test_stable_needs_one_settled_primary_and_only_healthy_settled_secondaries() -> None:
    def node(name: str, reported: str, assigned: str, healthy: bool = True) -> NodeState:
        return NodeState(name, 1, reported, assigned, healthy, True)

    primary, secondary = (
        node("node1", "primary", "primary"),
        node("node2", "secondary", "secondary"),
    )
    assert stable_primary([primary, secondary]) == "node1"
    assert stable_primary([primary, node("node2", "secondary", "catchingup")]) is None
    assert stable_primary([node("node1", "wait_primary", "primary"), secondary]) is None
    assert stable_primary([primary, node("node2", "secondary", "secondary", False)]) is None


def test_fast_timings_are_lower_than_pg_auto_failovers_own() -> None:
    for fast, default in zip(
        dataclasses.astuple(FAST), dataclasses.astuple(DEFAULT_TIMING), strict=True
    ):
        assert fast <= default
    assert "ALTER SYSTEM SET pgautofailover.node_considered_unhealthy_timeout = 2000" in (
        FAST.monitor_statements()
    )


async def test_kill_now_ends_a_whole_tree_even_a_child_that_ignores_sigterm() -> None:
    script = "trap '' TERM; sleep 60 & sleep 60 & wait"
    shell = await asyncio.create_subprocess_exec("sh", "-c", script, start_new_session=True)
    try:
        for _ in range(100):  # at most 5 s for the shell to start its children
            if len(procs.descendants([shell.pid])) == 3:
                break
            await asyncio.sleep(0.05)
        tree = procs.descendants([shell.pid])
        assert len(tree) == 3
        assert not await procs.kill_now(tree, 5.0)
        assert all(not procs.is_alive(pid) for pid in tree)
    finally:
        with contextlib.suppress(ProcessLookupError):
            shell.kill()
        await shell.wait()


async def test_terminate_escalates_to_sigkill_after_the_grace() -> None:
    stubborn = await asyncio.create_subprocess_exec("sh", "-c", "trap '' TERM; sleep 60 & wait")
    try:
        await asyncio.sleep(0.2)
        started = time.monotonic()
        tree = procs.descendants([stubborn.pid])
        assert not await procs.terminate(tree, 0.5)
        assert time.monotonic() - started >= 0.5
    finally:
        with contextlib.suppress(ProcessLookupError):
            stubborn.kill()
        await stubborn.wait()
    assert stubborn.returncode == -signal.SIGKILL


# -- with a cluster ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.postgres
@cluster_test
@pytest.mark.parametrize("nodes", [2, 3])
async def test_every_acknowledged_row_survives_a_sigkill_of_the_primary(nodes: int) -> None:
    sync = 1 if nodes == 3 else None
    async with PgAutoFailoverCluster(nodes, number_sync_standbys=sync) as cluster:
        async with writers(cluster) as both:
            await asyncio.sleep(1.0)  # rows acknowledged by the first primary
            semaphores, shm = node_ipc(cluster, await cluster.wait_for_primary())
            killed_at = time.monotonic()
            old = await cluster.kill_primary()
            new = await cluster.wait_for_primary(FAILOVER_BUDGET, other_than=old)
            outages = await until_both_write_again(both, killed_at)
            await asyncio.sleep(0.5)  # rows acknowledged by the new primary
        report(
            f"{nodes} nodes, SIGKILL of {old}: {new} promoted, writes again after "
            f"{outages[0]:.2f} s (asyncpg), {outages[1]:.2f} s (SQLAlchemy)"
        )
        assert max(outages) < FAILOVER_BUDGET
        stored = await rows_on(cluster, new)
        for writes in both:
            assert writes.acked_at[0] < killed_at < writes.acked_at[-1]
            assert set(writes.acked) <= stored, f"{writes.via} lost acknowledged rows"
    # What the SIGKILL left behind went with the cluster.
    assert semaphores and shm is not None
    assert not semaphores & ipc_ids("sem") and shm not in ipc_ids("shm")


@pytest.mark.slow
@pytest.mark.postgres
@cluster_test
@pytest.mark.parametrize("nodes", [2, 3])
async def test_every_acknowledged_row_survives_a_switchover(nodes: int) -> None:
    sync = 1 if nodes == 3 else None
    async with PgAutoFailoverCluster(nodes, number_sync_standbys=sync) as cluster:
        old = await cluster.primary()
        async with writers(cluster) as both:
            await asyncio.sleep(1.0)
            asked_at = time.monotonic()
            new = await cluster.switchover()
            outages = await until_both_write_again(both, asked_at)
            await asyncio.sleep(0.5)
        report(
            f"{nodes} nodes, switchover {old} -> {new}: writes again after "
            f"{outages[0]:.2f} s (asyncpg), {outages[1]:.2f} s (SQLAlchemy)"
        )
        assert new != old
        stored = await rows_on(cluster, new)
        for writes in both:
            assert set(writes.acked) <= stored, f"{writes.via} lost acknowledged rows"


@pytest.mark.slow
@pytest.mark.postgres
@cluster_test
async def test_two_nodes_turn_sync_rep_off_when_the_standby_stops() -> None:
    async with PgAutoFailoverCluster(2) as cluster:
        primary = await cluster.wait_until_stable()
        standby = next(name for name in cluster.node_names if name != primary)
        assert (await cluster.synchronous_standby_names()).startswith("ANY 1 (")
        await cluster.stop_node(standby)
        stopped_at = time.monotonic()
        await cluster.wait_for_state(primary, "wait_primary", FAILOVER_BUDGET)
        report(
            f"2 nodes, standby stopped: primary in wait_primary after "
            f"{time.monotonic() - stopped_at:.2f} s"
        )
        settings = await cluster.replication_settings()
        assert settings["synchronous_standby_names"] == ""  # the trap: nothing replicates
        assert settings["synchronous_commit"] == "on"
        conn = await asyncpg.connect(cluster.multi_host_dsn, timeout=5.0)
        try:
            await conn.execute("CREATE TABLE unreplicated (i int)", timeout=WRITE_TIMEOUT)
        finally:
            await conn.close()
        await cluster.start_node(standby)
        assert await cluster.wait_until_stable() == primary
        assert (await cluster.synchronous_standby_names()).startswith("ANY 1 (")


@pytest.mark.slow
@pytest.mark.postgres
@cluster_test
async def test_three_nodes_with_one_sync_standby_keep_sync_rep_when_a_standby_stops() -> None:
    async with PgAutoFailoverCluster(3, number_sync_standbys=1) as cluster:
        primary = await cluster.wait_until_stable()
        first, second = [name for name in cluster.node_names if name != primary]
        await cluster.stop_node(first)
        await cluster.wait_until(
            lambda states: next((s for s in states if s.name == first and not s.healthy), None),
            FAILOVER_BUDGET,
            f"{first} unhealthy",
        )
        await asyncio.sleep(2.0)  # a few more rounds of the monitor
        states = {s.name: s for s in await cluster.states()}
        assert states[primary].settled_in("primary")
        assert (await cluster.synchronous_standby_names()).startswith("ANY 1 (")
        conn = await asyncpg.connect(cluster.multi_host_dsn, timeout=5.0)
        try:
            await conn.execute("CREATE TABLE replicated (i int)", timeout=WRITE_TIMEOUT)
            await cluster.stop_node(second)  # now no standby can acknowledge a commit
            with pytest.raises(TimeoutError):
                await conn.execute("CREATE TABLE blocked (i int)", timeout=WRITE_TIMEOUT)
        finally:
            conn.terminate()


@pytest.mark.slow
@pytest.mark.postgres
@cluster_test
async def test_a_start_that_fails_halfway_leaves_no_process_behind() -> None:
    ports = [free_port() for _ in range(3)]
    lines: list[str] = []
    with socket.socket() as squatter:  # node2's Postgres cannot bind its port
        squatter.bind(("127.0.0.1", ports[2]))
        squatter.listen()
        cluster = PgAutoFailoverCluster(2, ports=ports, start_timeout=15.0, progress=lines.append)
        with pytest.raises(PgClusterError, match="timed out waiting for one primary") as caught:
            await cluster.start()
    assert "node2.log" in str(caught.value)  # the error quotes the nodes' logs
    directory = next(line.split()[2].rstrip(",") for line in lines if " directory " in line)
    assert directory.startswith(tempfile.gettempdir()) and not exists(directory)
    assert cluster.directory is None
    assert not procs.pids_mentioning(directory)  # pg_autoctl and postmasters name it
    assert not exists(f"/tmp/pg_autoctl{directory}")  # its pid files stayed inside


@pytest.mark.slow
@pytest.mark.postgres
@cluster_test
async def test_a_postmaster_killed_alone_is_restarted_by_pg_autoctl() -> None:
    async with PgAutoFailoverCluster(2, progress=None) as cluster:
        primary = await cluster.wait_until_stable()
        assert cluster.directory is not None
        pgdata = cluster.directory / primary
        killed = await cluster.kill_postmaster(primary)
        killed_at = time.monotonic()
        while procs.postmaster_pid(pgdata) in (None, killed):
            assert time.monotonic() - killed_at < FAILOVER_BUDGET, "pg_autoctl did not restart it"
            await asyncio.sleep(0.1)
        restarted_after = time.monotonic() - killed_at
        await asyncio.sleep(5.0)  # the monitor acts on a stale view for a few seconds
        now = await cluster.wait_until_stable()
        # pg_auto_failover 2.0 reports the restarting primary as down: it usually fails over.
        report(
            f"postmaster of {primary} SIGKILLed: restarted after {restarted_after:.2f} s, "
            f"primary now {now} ({'failover' if now != primary else 'no failover'})"
        )


def exists(path: str) -> bool:
    """Say whether a path exists (a blocking look, out of the async test's body)."""
    return Path(path).exists()


def ipc_ids(kind: str) -> set[int]:
    """Return the ids of the System V semaphores ("sem") or shared memory ("shm") now."""
    table = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
    return {int(line.split()[1]) for line in table}


def node_ipc(cluster: PgAutoFailoverCluster, name: str) -> tuple[set[int], int | None]:
    """Return a node's pg_autoctl log semaphores and its postmaster's shared memory id."""
    assert cluster.directory is not None
    pgdata = cluster.directory / name
    semaphores = {procs.log_semaphore(pid) for pid in procs.pids_mentioning(str(pgdata))}
    return {s for s in semaphores if s is not None}, procs.postmaster_shm_id(pgdata)
