"""The two-node trap of pg_auto_failover, shown on a real formation, and what onejob does.

With two data nodes pg_auto_failover keeps writes going when the standby is away: the
primary goes ``wait_primary`` and clears ``synchronous_standby_names``, so commits are
acknowledged from the primary alone. A job created then lives on one disk. If the primary
dies before the standby caught up, promoting that standby would lose the job, and the
client's retry with the same key would create it again: the intention would run twice.
pg_auto_failover does not promote a standby that missed writes: the formation waits,
without a primary, until the old one is back. onejob's part is the start-up check
(``[database] synchronous_standby``): ``require`` refuses to serve on such a primary,
``warn`` logs that replication slots wait for standbys that are not attached.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable

from scenarios.context import ScenarioContext
from scenarios.harness import Process, free_port, log_tail
from scenarios.pgcluster import PgAutoFailoverCluster
from scenarios.setup import GatewayConfig
from scenarios.stage import job_id_of, post_job

WAIT_PRIMARY_TIMEOUT = 30.0  # seconds the primary has to notice its standby is gone
NO_PROMOTION_WATCH = 8.0  # seconds the formation is watched after the primary died
STABLE_TIMEOUT = 60.0  # seconds the old primary has to come back as the primary
JOB_TIMEOUT = 30.0  # seconds the job acknowledged in the trap has to be found again
SERVE_TIMEOUT = 60.0  # seconds ``onejob serve`` may take to refuse
IDLE_SLOTS = "replication slots for standbys that are not attached"  # the warn log line
NO_STANDBY = "no synchronous standby"  # what the refusal says


async def show_two_node_trap(
    ctx: ScenarioContext,
    sim: Process,
    config: GatewayConfig,
    contract: str,
    progress: Callable[[str], None],
) -> None:
    """Run a 2-node formation into the trap and check what onejob and pg_auto_failover do."""
    cluster = PgAutoFailoverCluster(2, progress=progress)
    began = time.monotonic()
    await cluster.start()
    gateway: Process | None = None
    try:
        ctx.note(f"2-node formation started in {time.monotonic() - began:.1f} s")
        primary = await cluster.wait_until_stable()
        standby = next(n for n in cluster.node_names if n != primary)
        before = await cluster.synchronous_standby_names()
        ctx.action(f"2 nodes: stop the standby {standby}")
        stopped = time.monotonic()
        await cluster.stop_node(standby)
        await cluster.wait_for_state(primary, "wait_primary", WAIT_PRIMARY_TIMEOUT)
        names = await cluster.synchronous_standby_names()
        ctx.expect(
            names == "",
            "2 nodes, standby stopped: the primary (wait_primary) replicates to nobody",
            f"synchronous_standby_names {before!r} -> {names!r}",
        )
        ctx.note(
            f"2 nodes: {primary} went wait_primary {time.monotonic() - stopped:.1f} s after "
            f"{standby} stopped; synchronous_standby_names {before!r} -> {names!r}"
        )
        await refused_with_require(ctx, cluster, config)
        gateway = await ctx.gateway(
            "gateway-2-nodes", with_database(config, "warn"), cluster.multi_host_url
        )
        ctx.expect(
            IDLE_SLOTS in log_tail(gateway.log_path, 100_000),
            'synchronous_standby = "warn" starts, and warns that replication slots wait',
            f"no {IDLE_SLOTS!r} in {gateway.log_path}",
        )
        key = await ctx.harness.create_key(cluster.multi_host_url, "bob")
        created = await post_job(ctx, gateway, key, "trap-1", ctx.job_body(contract))
        job_id = job_id_of(created)
        ctx.expect(
            created.status_code == 201 and job_id is not None,
            "a job is acknowledged (201) while no standby has a copy",
            f"status {created.status_code}: {created.text[:200]}",
        )
        assert job_id is not None
        await primary_dies(ctx, cluster, gateway, key, job_id, primary, standby)
        with contextlib.suppress(Exception):
            await ctx.capture(gateway, key, job_id, sim, "2 nodes")
    finally:
        if gateway is not None:
            await gateway.stop()
        await cluster.stop()


def with_database(config: GatewayConfig, synchronous_standby: str) -> GatewayConfig:
    """Return the config with another ``[database] synchronous_standby``."""
    database = {**config.database, "synchronous_standby": synchronous_standby}
    return dataclasses.replace(config, database=database)


async def refused_with_require(
    ctx: ScenarioContext, cluster: PgAutoFailoverCluster, config: GatewayConfig
) -> None:
    """Run ``onejob serve`` with ``require`` on the trapped primary: exit 2, one line."""
    path = with_database(config, "require").write(ctx.harness.work_dir / "require.toml")
    args = ["serve", "--host", "127.0.0.1", "--port", str(free_port()), "--config", str(path)]
    code, _, err = await ctx.harness.run_cli(
        *args, "--database-url", cluster.multi_host_url, timeout=SERVE_TIMEOUT
    )
    # Besides the JSON log records (the migration's), one line says why it will not serve.
    said = [line for line in err.splitlines() if line.strip() and not line.startswith("{")]
    ctx.expect(
        code == 2
        and len(said) == 1
        and said[0].startswith("onejob serve:")
        and NO_STANDBY in said[0],
        'synchronous_standby = "require": onejob serve refuses, exit 2, one line',
        f"exit {code}; besides its JSON log: {said}" if said else f"exit {code}: {err[-600:]}",
    )
    ctx.note(f"onejob serve with require on the trapped primary: exit {code}: {said[0]}")


async def primary_dies(
    ctx: ScenarioContext,
    cluster: PgAutoFailoverCluster,
    gateway: Process,
    key: str,
    job_id: str,
    primary: str,
    standby: str,
) -> None:
    """SIGKILL the lone primary, bring the standby back: the formation waits for the old one."""
    ctx.action(f"SIGKILL the primary {primary}; start the standby {standby}, which missed the job")
    await cluster.crash_node(primary)
    await cluster.start_node(standby)
    watched = time.monotonic()
    seen: set[str] = set()
    answers: set[int] = set()
    while time.monotonic() - watched < NO_PROMOTION_WATCH:
        states = await cluster.states()
        seen |= {f"{s.name} {s.reported}/{s.assigned}" for s in states if s.name == standby}
        if await cluster.primary() not in (None, primary):
            break
        response = await ctx.request(
            "GET", f"{gateway.base_url}/v1/jobs/{job_id}", key=key, record=False
        )
        answers.add(response.status_code)
        await asyncio.sleep(0.5)
    promoted = await cluster.primary()
    ctx.expect(
        promoted in (None, primary),
        f"pg_auto_failover does not promote {standby}, which missed the job: the formation waits",
        f"after {time.monotonic() - watched:.1f} s the primary is {promoted}; {sorted(seen)}",
    )
    ctx.expect(
        answers == {503},
        "while the formation has no primary, the gateway answers 503 (never a 500)",
        f"GET /v1/jobs/{job_id} answered {sorted(answers)}",
    )
    ctx.note(
        f"2 nodes, {primary} SIGKILLed while alone: for {NO_PROMOTION_WATCH:.0f} s no primary "
        f"({standby} as reported/assigned: {', '.join(sorted(seen))}); the job read through "
        f"the gateway answered {sorted(answers)}. Promoting {standby} by hand would have "
        "lost the acknowledged job, and a retry of its key would have made a second one."
    )
    ctx.action(f"start {primary} again")
    await cluster.start_node(primary)
    back = await cluster.wait_until_stable(STABLE_TIMEOUT)
    ctx.expect(back == primary, f"{primary} is the primary again", f"primary {back}")
    job = await ctx.wait_job(
        gateway,
        key,
        job_id,
        lambda j: j.get("id") == job_id,
        JOB_TIMEOUT,
        "the job acknowledged in the trap is there once the old primary is back",
    )
    ctx.note(f"2 nodes: {primary} back, the job is {job.get('status')}, nothing lost")
