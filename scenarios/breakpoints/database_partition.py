"""Scenario 13: a silent network partition between a gateway and PostgreSQL, twice.

The gateway runs in a network namespace; PostgreSQL and the simulator are reached over a
veth pair (``scenarios.netpartition``). Under load (clients that retry each intention
with its key until it is acknowledged), iptables drops every packet between the gateway
and the database for ``CUTS`` seconds, then lets them through again: no reset, no FIN,
what a failed switch or a security-group change does. The provider stays reachable.

What must hold: every request is answered within the database deadline plus a second (a
``Prefer: wait`` one within its wait on top), only with 201, 200 or 503; ``/readyz``
says 503 within 2 s of a cut and 200 within 2 s of a heal; the first acknowledgement
after a heal comes within 2 s; nothing acknowledged is lost, a key never names two jobs,
no provider request is sent twice, and an attempt whose request never left is never
``unknown``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from sqlalchemy.engine import make_url

from scenarios.context import ScenarioContext, ScenarioSkipped, listed
from scenarios.harness import free_port
from scenarios.netpartition import DATABASE, PROVIDER, NetPartition, missing_prerequisite
from scenarios.registry import scenario
from scenarios.retrying_clients import ReadinessPoller, RetryingClients
from scenarios.setup import GatewayConfig
from scenarios.stage import warm_simulator

NAME = "database-partition"
CUTS = (20.0, 40.0)  # seconds each partition lasts
DEADLINE = 5.0  # seconds: the gateway's database timeout (the product's default)
CLIENTS = 8
WAITING = 2  # of the clients, those that ask Prefer: wait=WAIT
WAIT = 5  # seconds
STEADY = 5.0  # seconds of load before the first cut
RECOVERY = 12.0  # seconds of load after each heal
READY_CUT = 2.0  # seconds within which /readyz must say 503 after a cut
READY_HEAL = 2.0  # seconds within which /readyz must say 200 after a heal
FIRST_AFTER_HEAL = 2.0  # seconds within which an acknowledgement must come after a heal
SETTLE = 30.0  # seconds the jobs may take to settle once the load stops
PAUSE = 0.2  # seconds a client rests between two intentions


@scenario(
    NAME,
    "A silent partition from PostgreSQL (20 s, then 40 s): timely 503s, honest readiness, "
    "quick recovery, nothing lost or run twice",
    order=13,
    postgres_run_only=True,
    timeout=300.0,
)
async def database_partition(ctx: ScenarioContext) -> None:
    """Cut the gateway's network to PostgreSQL twice under load; check every answer."""
    why = missing_prerequisite()
    if why:
        raise ScenarioSkipped(why)
    database_url = await ctx.fresh_db()
    sim_port = free_port()
    sim = await ctx.simulator(port=sim_port)
    net = await NetPartition.open()
    try:
        await partitioned(ctx, net, sim, sim_port, database_url)
    finally:
        await net.close()


async def partitioned(
    ctx: ScenarioContext,
    net: NetPartition,
    sim: Any,
    sim_port: int,
    database_url: str,
    pooled_url: str | None = None,
) -> None:
    """Run the scenario's load, cuts and checks; ``pooled_url``: the gateway reaches the
    database through this transaction pooler (``database-partition-pgbouncer``), whose
    port the cuts then cut instead."""
    pg = make_url(pooled_url or database_url)
    await net.forward(DATABASE, pg.port or 5432, host=pg.host or "127.0.0.1")
    provider = await net.forward(PROVIDER, sim_port)
    pooler = {"pooler": "transaction"} if pooled_url else {}
    config = GatewayConfig(
        sim_port=provider.port,
        sim_host=provider.host,
        certifications_path=ctx.empty_registry(),
        database={"timeout": DEADLINE, "connect_timeout": DEADLINE, **pooler},
    )
    path = config.write(ctx.harness.work_dir / "gateway.toml")
    port = free_port()
    argv = [
        *ctx.harness.onejob,
        "serve",
        "--host",
        "0.0.0.0",
        "--port",
        str(port),
        "--workers",
        "1",
        "--config",
        str(path),
        "--database-url",
        net.url_through(pooled_url or database_url),
    ]
    env = {"ONEJOB_INSTANCE_ID": "gateway"}
    gateway = await net.spawn(ctx.harness, "gateway", argv, port, "/readyz", env)
    key, admin = await asyncio.gather(
        ctx.harness.create_key(database_url, "alice"),
        ctx.harness.create_key(database_url, "ops", admin=True),
    )
    contract = await ctx.contract(gateway, key)
    await warm_simulator(ctx, sim, contract)
    body = ctx.job_body(contract)
    ctx.note(
        f"gateway in network namespace {net.namespace}; PostgreSQL and the simulator through "
        f"{net.host_address}; database timeout {DEADLINE:.0f} s; {CLIENTS} clients "
        f"({WAITING} with Prefer: wait={WAIT}), each retrying its key on 503"
    )

    clients = RetryingClients(
        [gateway.base_url],
        key,
        lambda _: body,
        clients=CLIENTS,
        pause=PAUSE,
        prefix="dp",
        waiting=WAITING,
        wait=WAIT,
    )
    ready = ReadinessPoller(gateway.base_url)
    clients.start()
    tasks = [asyncio.create_task(ready.run())]
    windows: list[tuple[float, float, float]] = []  # (cut, heal, seconds)
    try:
        await asyncio.sleep(STEADY)
        first = next((t.job_id for t in clients.answers if t.job_id), None)
        if first is not None:
            ctx.watch(gateway, key, first, sim, "before the cuts")
        for seconds in CUTS:
            ctx.action(f"iptables DROP between the gateway and PostgreSQL for {seconds:.0f} s")
            await net.cut(DATABASE)
            cut = time.monotonic()
            await asyncio.sleep(seconds)
            await net.heal(DATABASE)
            healed = time.monotonic()
            ctx.action("partition healed")
            windows.append((cut, healed, seconds))
            await asyncio.sleep(RECOVERY)
    finally:
        ready.stop.set()
        await clients.stop()
        await asyncio.gather(*tasks, return_exceptions=True)
    ctx.action("load stopped")
    try:
        await _checks(ctx, gateway, sim, key, admin, clients, ready, windows)
    finally:
        await ctx.capture_watched()  # while the gateway, in the namespace, still runs


async def _checks(
    ctx: ScenarioContext,
    gateway: Any,
    sim: Any,
    key: str,
    admin: str,
    clients: RetryingClients,
    ready: ReadinessPoller,
    windows: list[tuple[float, float, float]],
) -> None:
    tries = clients.answers
    statuses = Counter(t.status for t in tries)
    late = [t for t in tries if t.took > (t.wait or 0) + DEADLINE + 1.0]
    per_cut = [_window_facts(clients, ready, cut, healed) for cut, healed, _ in windows]
    for (_, _, seconds), facts in zip(windows, per_cut, strict=True):
        ctx.note(f"{seconds:.0f} s cut: {facts['summary']}")
    ctx.note(
        f"{len(tries)} requests for {len(clients.acknowledged())} acknowledged intentions; "
        f"statuses {dict(sorted((str(k), v) for k, v in statuses.items()))}; slowest "
        f"{max((t.took for t in tries), default=0):.2f} s"
    )
    ctx.expect(None not in statuses, "every request was answered", _examples(tries, None))
    ctx.expect(
        set(statuses) <= {200, 201, 503},
        "only 201, 200 or 503 (never a 500)",
        f"statuses {dict(statuses)}",
    )
    ctx.expect(
        not late,
        f"every answer within the database deadline ({DEADLINE:.0f} s) plus 1 s, plus its wait",
        "; ".join(f"{t.key} {t.status} after {t.took:.2f} s" for t in late[:5]),
    )
    for (_, _, seconds), facts in zip(windows, per_cut, strict=True):
        ctx.expect(
            facts["ready_down"] is not None and facts["ready_down"] <= READY_CUT,
            f"/readyz says 503 within {READY_CUT:.0f} s of the {seconds:.0f} s cut",
            facts["summary"],
        )
        ctx.expect(
            facts["ready_up"] is not None and facts["ready_up"] <= READY_HEAL,
            f"/readyz says 200 within {READY_HEAL:.0f} s of the heal",
            facts["summary"],
        )
        ctx.expect(
            facts["first_ok"] is not None and facts["first_ok"] <= FIRST_AFTER_HEAL,
            f"the first 201/200 within {FIRST_AFTER_HEAL:.0f} s of the heal",
            facts["summary"],
        )
    slow_probe = max((took for _, took, _ in ready.probes), default=0.0)
    ctx.expect(slow_probe <= 1.2, "/readyz answers within its second", f"slowest {slow_probe:.2f}")
    await _check_the_jobs(ctx, gateway, sim, key, admin, clients)


def _window_facts(
    clients: RetryingClients, ready: ReadinessPoller, cut: float, healed: float
) -> dict[str, Any]:
    """Measure one cut: readiness down and up, the first acknowledgement after the heal."""
    down = ready.first(503, cut)
    up = ready.first(200, healed)
    firsts = [t.answered for t in clients.answers if t.job_id and t.answered >= healed]
    created = [t.answered for t in clients.answers if t.status == 201 and t.answered >= healed]
    during = Counter(t.status for t in clients.answers if cut <= t.answered < healed)
    facts: dict[str, Any] = {
        "ready_down": None if down is None else down - cut,
        "ready_up": None if up is None else up - healed,
        "first_ok": None if not firsts else min(firsts) - healed,
        "first_201": None if not created else min(created) - healed,
    }
    shown = ", ".join(f"{k} {'-' if v is None else f'{v:.2f} s'}" for k, v in facts.items())
    answers = dict(sorted((str(k), v) for k, v in during.items()))
    facts["summary"] = f"{shown}; answers during the cut {answers}"
    return facts


async def _check_the_jobs(
    ctx: ScenarioContext,
    gateway: Any,
    sim: Any,
    key: str,
    admin: str,
    clients: RetryingClients,
) -> None:
    keys_jobs: dict[str, set[str]] = {}
    for t in clients.answers:
        if t.job_id:
            keys_jobs.setdefault(t.key, set()).add(t.job_id)
    split = {k: v for k, v in keys_jobs.items() if len(v) > 1}
    ctx.expect(not split, "every key named one job", f"{len(split)} keys with two: {split}")

    jobs = await _settled_jobs(ctx, gateway, key)
    stored = {j["id"]: j for j in jobs}
    acknowledged = {job for ids in keys_jobs.values() for job in ids}
    lost = acknowledged - stored.keys()
    ctx.expect(
        not lost, "every acknowledged job is stored", f"{len(lost)} lost: {sorted(lost)[:5]}"
    )

    calls = await ctx.sim_calls(sim)
    sent = Counter(c["idempotency_key"] for c in calls)
    twice = {k: n for k, n in sent.items() if k and n > 1}
    ctx.expect(not twice, "no provider request was sent twice for one attempt", str(twice))
    states = Counter(str(j.get("status")) for j in jobs)
    unknown = await _unknown_attempts(ctx, gateway, admin)
    never_sent = [a for a in unknown if a.get("downstream_key") not in sent]
    ctx.note(
        f"{len(jobs)} jobs stored: {dict(sorted(states.items()))}; {len(calls)} provider "
        f"calls; {len(unknown)} attempts unknown, {len(never_sent)} of them never sent"
    )
    ctx.expect(
        not never_sent,
        "no attempt whose request never left is unknown",
        "; ".join(f"{a['id']} ({a.get('error')})" for a in never_sent[:5]),
    )
    unsettled = [j["id"] for j in jobs if j.get("status") not in ("succeeded", "unknown")]
    ctx.expect(
        not unsettled,
        "every job settled: succeeded, or unknown with its request sent",
        f"{len(unsettled)} not settled: {unsettled[:5]}",
    )


async def _settled_jobs(ctx: ScenarioContext, gateway: Any, key: str) -> list[dict[str, Any]]:
    """Every job of the owner, once none is queued or running (or ``SETTLE`` passed)."""
    deadline = time.monotonic() + SETTLE
    while True:
        jobs = await _all_jobs(ctx, gateway, key)
        busy = [j for j in jobs if j.get("status") in ("queued", "running")]
        if not busy or time.monotonic() > deadline:
            return jobs
        await asyncio.sleep(1.0)


async def _all_jobs(ctx: ScenarioContext, gateway: Any, key: str) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        url = f"{gateway.base_url}/v1/jobs?limit=100" + (f"&cursor={cursor}" if cursor else "")
        response = await ctx.request("GET", url, key=key, record=False)
        jobs.extend(listed(response, "jobs"))
        cursor = response.json().get("next_cursor")
        if not cursor:
            return jobs


async def _unknown_attempts(ctx: ScenarioContext, gateway: Any, admin: str) -> list[dict[str, Any]]:
    url = f"{gateway.base_url}/v1/admin/attempts?state=unknown&limit=1000"
    response = await ctx.request("GET", url, key=admin, record=False)
    return listed(response, "attempts")


def _examples(tries: list[Any], status: int | None) -> str:
    return "; ".join(f"{t.key}: {t.problem}" for t in tries if t.status == status)[:500]
