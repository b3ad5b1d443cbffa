"""The usual setup of a scenario: one simulator, one gateway on a fresh database, API keys."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import httpx

from scenarios.context import ScenarioContext
from scenarios.harness import Process, free_port
from scenarios.setup import SIM_OPENAI, GatewayConfig


@dataclasses.dataclass(slots=True)
class Stage:
    """Running processes and credentials a scenario drives."""

    sim: Process
    gateway: Process
    key: str
    admin_key: str  #: empty unless ``stage(admin=True)``
    contract: str
    database_url: str
    config: GatewayConfig
    config_path: Path


async def stage(
    ctx: ScenarioContext,
    *,
    certified: bool = False,
    hedgeable: bool = False,
    admin: bool = False,
    **config: Any,
) -> Stage:
    """Start a simulator and a gateway (fallbacks certified only when asked)."""
    sim_port = free_port()
    registry = await ctx.certified_registry() if certified else ctx.empty_registry()
    gateway_config = GatewayConfig(sim_port=sim_port, certifications_path=registry, **config)
    database_url = await ctx.fresh_db()
    # Independent start-ups run side by side: most of a scenario's setup is Python imports.
    sim, gateway = await asyncio.gather(
        ctx.simulator(port=sim_port), ctx.gateway("gateway", gateway_config, database_url)
    )
    # Every `onejob keys create` is a Python start-up; make the admin key only when needed.
    keys = [ctx.harness.create_key(database_url, "alice")]
    if admin:
        keys.append(ctx.harness.create_key(database_url, "ops", admin=True))
    key, *rest = await asyncio.gather(*keys)
    admin_key = rest[0] if rest else ""
    contract = await ctx.contract(gateway, key, hedgeable=hedgeable)
    await warm_simulator(ctx, sim, contract)
    return Stage(
        sim,
        gateway,
        key,
        admin_key,
        contract,
        database_url,
        gateway_config,
        ctx.harness.work_dir / "gateway.toml",
    )


async def warm_simulator(ctx: ScenarioContext, sim: Process, contract: str) -> None:
    """Answer one request, then forget it, so the simulator's first-call catalog load
    (which blocks its event loop for a moment) does not skew a scenario's timings."""
    url = f"{sim.base_url}/p/{SIM_OPENAI}/v1/chat/completions"
    await ctx.request("POST", url, json_body=provider_body(ctx, contract), record=False)
    await ctx.reset_simulator(sim)


def provider_body(ctx: ScenarioContext, contract: str) -> dict[str, Any]:
    """Return a Chat Completions body for sim-openai carrying one of ``contract``'s inputs,
    as the gateway would send it (for calls a scenario makes to the simulator itself)."""
    from contracts.loader import CATALOG_ROOT, load_contract

    loaded = load_contract(CATALOG_ROOT / contract.split("@", 1)[0])
    prompt = loaded.render(ctx.job_body(contract)["input"])
    return {
        "model": "sim-gpt",
        "messages": [
            {"role": "system", "content": prompt.system},
            {"role": "user", "content": prompt.user},
        ],
    }


async def post_job(
    ctx: ScenarioContext,
    gateway: Process,
    key: str,
    idempotency_key: str,
    body: dict[str, Any],
    *,
    actor: str = "client",
    wait: int | None = None,
    record: bool = True,
) -> httpx.Response:
    """``POST /v1/jobs`` with an ``Idempotency-Key`` (and ``Prefer: wait=N`` when asked)."""
    headers = {"Idempotency-Key": f'"{idempotency_key}"'}
    if wait is not None:
        headers["Prefer"] = f"wait={wait}"
    return await ctx.request(
        "POST",
        f"{gateway.base_url}/v1/jobs",
        actor=actor,
        key=key,
        json_body=body,
        headers=headers,
        record=record,
        timeout=(wait or 0) + 30.0,
    )


async def create_watched_job(
    ctx: ScenarioContext,
    s: Stage,
    idempotency_key: str,
    body: dict[str, Any],
    *,
    wait: int | None = None,
    what: str = "the job is created",
    label: str = "",
) -> str:
    """Create a job on the stage's gateway, expect 201 (``what``), put it on the timeline.

    Return its id; the scenario stops here if the gateway made no job.
    """
    created = await post_job(ctx, s.gateway, s.key, idempotency_key, body, wait=wait)
    ctx.expect(
        created.status_code == 201,
        what,
        f"status {created.status_code}: {created.text[:200]}",
    )
    job_id = job_id_of(created)
    assert job_id is not None
    ctx.watch(s.gateway, s.key, job_id, s.sim, label)
    return job_id


async def concurrent_posts(
    ctx: ScenarioContext,
    gateways: list[Process],
    key: str,
    idempotency_key: str,
    body: dict[str, Any],
    count: int,
) -> list[httpx.Response]:
    """Fire ``count`` identical POSTs at once, spread round-robin over ``gateways``."""
    gate = asyncio.Event()

    async def one(i: int) -> httpx.Response:
        await gate.wait()
        return await post_job(
            ctx, gateways[i % len(gateways)], key, idempotency_key, body, actor=f"click#{i + 1}"
        )

    tasks = [asyncio.create_task(one(i)) for i in range(count)]
    await asyncio.sleep(0)  # let every task reach the gate before it opens
    gate.set()
    return list(await asyncio.gather(*tasks))


def job_id_of(response: httpx.Response) -> str | None:
    """Return the job id in a job response (None when the body has none)."""
    try:
        body = response.json()
    except ValueError:
        return None
    return str(body["id"]) if isinstance(body, dict) and "id" in body else None
