"""Scenario 14: ten failovers of PostgreSQL's primary under load, behind two gateways.

A pg_auto_failover formation as DESIGN's high availability asks for it: a monitor, a
primary and two standbys, ``number_sync_standbys = 1``, so every commit waits for one
standby and the standby promoted is one that has it. Two ``onejob serve`` processes run on
the multi-host URL (``target_session_attrs=read-write``); clients create jobs and retry the
same key on every 503 (:mod:`scenarios.retrying_clients`). Ten faults, switchover and SIGKILL
of the whole primary node in turn; the killed node rejoins as a standby before the next.
What must hold: only 201, 200 and 503 ``unavailable``; every acknowledged job found on
the final primary; one job per key; no downstream key called twice; every job settled or
``unknown``, and an ``unknown`` attempt was sent; the LISTEN relays back.

Then the two-node trap (:mod:`scenarios.two_node_trap`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable

from scenarios.context import ScenarioContext, ScenarioSkipped
from scenarios.harness import Process, free_port
from scenarios.job_audit import check_jobs, check_ready
from scenarios.pgautoctl import pg_autoctl, pg_bindir
from scenarios.pgcluster import PgAutoFailoverCluster
from scenarios.registry import scenario
from scenarios.retrying_clients import RetryingClients
from scenarios.setup import SIM_OPENAI, GatewayConfig
from scenarios.stage import warm_simulator
from scenarios.two_node_trap import show_two_node_trap

NAME = "database-failover"
NODES = 3  # a primary and two standbys, one of them synchronous (DESIGN, high availability)
FAULTS = 10  # failovers of the primary: switchover, SIGKILL, switchover, ...
CLIENTS = 10
PAUSE = 0.2  # seconds a client waits between two jobs
CALL_TIME = 0.4  # seconds the provider takes: some attempts are in flight at each fault
CALLS_SCRIPTED = 10_000  # calls that take CALL_TIME (more than the run makes)
RUNNERS = 8  # attempts each gateway runs at once
WINDOW_GOAL = 10.0  # seconds without any 201 around one fault: this machine's goal
WINDOW_LIMIT = 25.0  # seconds without any 201 around one fault past which it FAILs
RECOVERY_TIMEOUT = 60.0  # seconds a fault has for a 201 to come back
CALM = 1.0  # seconds of load between a recovered fault and the next
CAPTURE_TIMEOUT = 10.0  # seconds to put the watched jobs on the timeline


@dataclasses.dataclass(slots=True)
class Fault:
    """One failover and how long each part of it took."""

    number: int
    kind: str  #: ``switchover`` or ``SIGKILL``
    old: str
    began: float  # monotonic seconds
    new: str = ""
    promoted: float = 0.0  # seconds from began until another node was the primary
    stable: float = 0.0  # seconds from began until the formation was whole again


def cluster_log(ctx: ScenarioContext, name: str) -> Callable[[str], None]:
    """Return a progress callback that appends the cluster's lines to a log file."""
    path = ctx.harness.log_dir / f"{name}.log"

    def write(line: str) -> None:
        with path.open("a") as log:
            log.write(line + "\n")

    return write


@scenario(
    NAME,
    "Ten primary failovers under load, two gateways: nothing acknowledged lost or run twice",
    order=14,
    postgres_run_only=True,
    timeout=420.0,
)
async def database_failover(ctx: ScenarioContext) -> None:
    """Fail the primary over ten times under load, then show the two-node trap."""
    if pg_autoctl() is None or pg_bindir() is None:
        raise ScenarioSkipped("pg_autoctl is missing (apt-get install postgresql-N-auto-failover)")
    sim_port = free_port()
    config = GatewayConfig(
        sim_port=sim_port,
        certifications_path=ctx.empty_registry(),
        runners=RUNNERS,
        database={"synchronous_standby": "require"},
    )
    cluster = PgAutoFailoverCluster(
        NODES, number_sync_standbys=1, progress=cluster_log(ctx, "pgcluster-3-nodes")
    )
    sim = await ctx.simulator(port=sim_port)
    began = time.monotonic()
    try:
        await cluster.start()  # it stops what it started if it fails halfway
        ctx.note(
            f"3-node formation (number_sync_standbys=1) started in {time.monotonic() - began:.1f} s"
        )
        contract = await under_load(ctx, cluster, sim, config)
    finally:
        await cluster.stop()
    await show_two_node_trap(ctx, sim, config, contract, cluster_log(ctx, "pgcluster-2-nodes"))


async def under_load(
    ctx: ScenarioContext, cluster: PgAutoFailoverCluster, sim: Process, config: GatewayConfig
) -> str:
    """Run the faults under load and check what the clients and the provider saw."""
    url = cluster.multi_host_url
    first = await ctx.gateway("gateway-a", config, url)  # it migrates; then the others
    second, key = await asyncio.gather(
        ctx.gateway("gateway-b", config, url), ctx.harness.create_key(url, "alice")
    )
    gateways = [first, second]
    watched: list[tuple[str, str]] = []  # (job id, its timeline label)
    try:
        contract = await ctx.contract(first, key)
        await warm_simulator(ctx, sim, contract)
        delay = {"kind": "delay", "seconds": CALL_TIME}
        await ctx.script(sim, SIM_OPENAI, [delay], count=CALLS_SCRIPTED)
        clients = RetryingClients(
            [g.base_url for g in gateways],
            key,
            lambda seq: ctx.job_body(contract, seed=seq),
            clients=CLIENTS,
            pause=PAUSE,
        )
        ctx.action(f"{CLIENTS} clients start creating jobs on both gateways")
        load_began = time.monotonic()
        faults: list[Fault] = []
        clients.start()
        try:
            await created_after(ctx, clients, load_began, "the first job is created")
            for number in range(1, FAULTS + 1):
                faults.append(await one_fault(ctx, cluster, clients, number))
                await asyncio.sleep(CALM)
        finally:
            ended = time.monotonic()
            await clients.stop()
            watched += pick_watched(clients, faults)
        ctx.note(f"{len(faults)} faults under load in {ended - load_began:.1f} s")
        windows = report_faults(ctx, clients, faults, ended)
        # What was stored and sent first: a 500 must not hide a lost or doubled job.
        await check_jobs(ctx, cluster, gateways, key, clients, sim, watched)
        await check_ready(ctx, gateways)
        check_answers(ctx, clients, windows)
    finally:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CAPTURE_TIMEOUT):
                for job_id, label in watched:
                    await ctx.capture(first, key, job_id, sim, label)
        for gateway in gateways:  # before their database goes: no reconnecting in a loop
            await gateway.stop()
    return contract


async def one_fault(
    ctx: ScenarioContext, cluster: PgAutoFailoverCluster, clients: RetryingClients, number: int
) -> Fault:
    """Fail the primary over once (odd: switchover, even: SIGKILL); wait for a new 201."""
    old = await cluster.wait_until_stable()
    fault = Fault(number, "switchover" if number % 2 else "SIGKILL", old, time.monotonic())
    ctx.action(f"fault {number}: {fault.kind} of the primary {old}")
    if fault.kind == "switchover":
        fault.new = await cluster.switchover()
        fault.promoted = fault.stable = time.monotonic() - fault.began
    else:
        await cluster.kill_primary()
        fault.new = await cluster.wait_for_primary(RECOVERY_TIMEOUT, other_than=old)
        fault.promoted = time.monotonic() - fault.began
        ctx.action(f"{fault.new} promoted; {old} started again")
        await cluster.start_node(old)
        await cluster.wait_until_stable(RECOVERY_TIMEOUT)
        fault.stable = time.monotonic() - fault.began
    await created_after(ctx, clients, time.monotonic(), f"jobs are created after fault {number}")
    return fault


async def created_after(
    ctx: ScenarioContext, clients: RetryingClients, moment: float, what: str
) -> None:
    """Wait (bounded) for a 201 to a request sent after the moment."""
    deadline = time.monotonic() + RECOVERY_TIMEOUT
    while clients.first_created_after(moment) is None:
        if time.monotonic() > deadline:
            ctx.expect(False, what, f"no 201 within {RECOVERY_TIMEOUT:.0f} s")
        await asyncio.sleep(0.05)


def report_faults(
    ctx: ScenarioContext, clients: RetryingClients, faults: list[Fault], ended: float
) -> list[float]:
    """Note each fault's numbers; return each one's longest stretch without a 201."""
    windows: list[float] = []
    for fault, nxt in zip(faults, [*faults[1:], None], strict=True):
        until = nxt.began if nxt is not None else ended
        window = clients.longest_without_created(fault.began, until)
        windows.append(window)
        counts = ", ".join(
            f"{label}: {n}" for label, n in sorted(clients.statuses(fault.began, until).items())
        )
        steps = (
            f"done after {fault.stable:.1f} s"
            if fault.kind == "switchover"
            else f"{fault.new} promoted after {fault.promoted:.1f} s, {fault.old} back as a "
            f"standby after {fault.stable:.1f} s"
        )
        ctx.note(
            f"fault {fault.number}, {fault.kind} {fault.old} → {fault.new}: {steps}; longest "
            f"without a 201 {window:.1f} s; answers {counts}"
        )
    all_counts = dict(sorted(clients.statuses().items()))
    met = sum(w < WINDOW_GOAL for w in windows)
    ctx.note(
        f"answers: {all_counts}; longest without a 201: {max(windows, default=0.0):.1f} s, "
        f"{met} of {len(windows)} faults under the {WINDOW_GOAL:.0f} s goal"
    )
    return windows


def check_answers(ctx: ScenarioContext, clients: RetryingClients, windows: list[float]) -> None:
    """Check what the clients were told, and the longest stretch without a 201."""
    unexpected = clients.unexpected()
    ctx.expect(
        not unexpected,
        "every answer is 201, 200 or 503 urn:onejob:unavailable with Retry-After (no 500)",
        "; ".join(f"{a.label} {a.problem} on {a.key}" for a in unexpected[:5]),
    )
    silent = [a for a in clients.answers if a.status is None]
    ctx.expect(
        not silent,
        "every request got an HTTP answer",
        "; ".join(f"{a.label} on {a.key}" for a in silent[:5]),
    )
    ctx.expect(
        max(windows, default=0.0) < WINDOW_LIMIT,
        f"no fault kept every client from a 201 for {WINDOW_LIMIT:.0f} s",
        f"longest stretches {[round(w, 1) for w in windows]}",
    )


def pick_watched(clients: RetryingClients, faults: list[Fault]) -> list[tuple[str, str]]:
    """Return the first job, and one acknowledged after a 503 during the first SIGKILL."""
    acknowledged = clients.acknowledged()
    picked = [(min(ids), "first job") for ids in list(acknowledged.values())[:1]]
    kill = next((f for f in faults if f.kind == "SIGKILL"), None)
    retried = [a.key for a in clients.answers if a.status == 503 and kill and a.sent >= kill.began]
    for key in retried:
        if key in acknowledged:
            picked.append((min(acknowledged[key]), "retried through a SIGKILL"))
            break
    return picked
