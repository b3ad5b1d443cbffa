"""Scenario 10: nginx retries a timed-out POST on a second gateway; still one job, one call."""

from __future__ import annotations

import asyncio

from scenarios.context import ScenarioContext, ScenarioSkipped, brief, listed
from scenarios.harness import free_port
from scenarios.model import MarkKind, TimelineMark
from scenarios.nginx import SlowRelay, nginx_binary, start_nginx
from scenarios.registry import scenario
from scenarios.setup import GatewayConfig
from scenarios.stage import job_id_of, post_job, warm_simulator

NAME = "load-balancer-retry"
NGINX_READ_TIMEOUT = 2.0  # seconds nginx waits for a gateway before retrying elsewhere
GATEWAY_A_LAG = 5.0  # seconds the relay holds back gateway A's answers


@scenario(NAME, "nginx retries a timed-out POST on the second gateway: one job, one call", order=10)
async def load_balancer_retry(ctx: ScenarioContext) -> None:
    """Put a careless nginx in front of a lagging gateway A and a healthy gateway B."""
    binary = nginx_binary()
    if binary is None:
        raise ScenarioSkipped("nginx is not installed (Debian: apt-get install -y nginx)")
    sim_port = free_port()
    database_url = await ctx.fresh_db()
    config = GatewayConfig(sim_port=sim_port, certifications_path=ctx.empty_registry())
    # Gateway A migrates the database first; then B and the key need it migrated.
    sim, gateway_a = await asyncio.gather(
        ctx.simulator(port=sim_port), ctx.gateway("gateway-a", config, database_url)
    )
    gateway_b, key = await asyncio.gather(
        ctx.gateway("gateway-b", config, database_url),
        ctx.harness.create_key(database_url, "alice"),
    )
    contract = await ctx.contract(gateway_a, key)
    await warm_simulator(ctx, sim, contract)
    relay = SlowRelay(gateway_a.port, GATEWAY_A_LAG)
    await relay.start()
    try:
        nginx, access_log = await start_nginx(
            ctx.harness, [relay.port, gateway_b.port], NGINX_READ_TIMEOUT, binary
        )
        ctx.action("POST through nginx (gateway A lags)")
        response = await post_job(ctx, nginx, key, "lb-1", ctx.job_body(contract))
        ctx.expect(
            response.status_code in (200, 201),
            "the client gets a job through nginx",
            f"status {response.status_code}: {response.text[:200]}",
        )
        job_id = job_id_of(response)
        assert job_id is not None
        ctx.watch(gateway_b, key, job_id, sim)
        await asyncio.sleep(GATEWAY_A_LAG + 0.5 - NGINX_READ_TIMEOUT)
        lines = access_log.read_text().strip().splitlines() if access_log.exists() else []
        post_lines = [line for line in lines if '"POST /v1/jobs' in line]
        ctx.note("nginx access log: " + " | ".join(post_lines))
        ctx.expect(
            len(post_lines) == 1
            and f":{relay.port}, " in post_lines[0]
            and f":{gateway_b.port}" in post_lines[0],
            "nginx sent the POST to gateway A, timed out, and retried it on gateway B",
            post_lines[0] if post_lines else "no POST in the access log",
        )
        for relayed in relay.responses:
            ctx.timeline.append(
                TimelineMark(
                    ctx.rel(relayed.received_at),
                    "gateway A (behind the slow relay)",
                    MarkKind.FINISHED,
                    f"{relayed.status_line} (held back {GATEWAY_A_LAG:g} s)",
                )
            )
            ctx.timeline.append(
                TimelineMark(
                    ctx.rel(relayed.received_at) + GATEWAY_A_LAG,
                    "gateway A (behind the slow relay)",
                    MarkKind.LOST,
                    "nginx had given up" if not relayed.forwarded else "forwarded",
                )
            )
        exchange = next(e for e in ctx.exchanges if e.method == "POST")
        ctx.timeline.append(
            TimelineMark(
                exchange.at + exchange.elapsed,
                "client (through nginx)",
                MarkKind.ACTION,
                f"{exchange.status} after {exchange.elapsed:.1f} s: retried on gateway B",
            )
        )
        answered_a = [r.status_line for r in relay.responses]
        ctx.note(f"gateway A answered (after nginx gave up): {answered_a}")
        ctx.expect(
            any(" 201" in s for s in answered_a),
            "gateway A created the job (201), too late for nginx",
            str(answered_a),
        )
        ctx.expect(
            response.status_code == 200 and response.headers.get("idempotent-replayed") == "true",
            "gateway B replayed the same job to the client",
            f"status {response.status_code}",
        )
        job = await ctx.wait_job(
            gateway_b,
            key,
            job_id,
            lambda j: j.get("status") == "succeeded",
            15.0,
            "the job succeeds",
        )
        ctx.expect(len(job["attempts"]) == 1, "one attempt", brief(job))
        listing = await ctx.request("GET", f"{gateway_b.base_url}/v1/jobs", key=key)
        ctx.expect(
            len(listed(listing, "jobs")) == 1,
            "the owner has one job",
            listing.text[:200],
        )
        await ctx.wait_calls(sim, 2, 1.0)
        calls = await ctx.sim_calls(sim)
        ctx.expect(len(calls) == 1, "one provider call", f"{len(calls)} calls")
        ctx.expect(
            str(calls[0].get("idempotency_key", "")).startswith(job_id),
            "the provider call carries the job's downstream key",
            str(calls[0].get("idempotency_key")),
        )
    finally:
        await relay.close()
