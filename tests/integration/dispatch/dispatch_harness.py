"""A gateway with its dispatcher, and a simulator, on loopback sockets for integration tests."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
import socket
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from contracts.budget import Budget, usage_figures
from contracts.loader import load_catalog
from contracts.registry import CertificationRegistry, adapter_version_of
from gateway.app import ServiceFactory, create_app
from gateway.metrics import Metrics
from gateway.settings import Settings
from providers.config import ProviderConfig
from providers.simulator.control_client import SimulatorControl
from providers.simulator.server import RunningSimulator

CONTRACT = "ticket-triage@1"
STARTUP_TIMEOUT = 15.0  # seconds
CASES = Path(__file__).resolve().parents[3] / "contracts/catalog/ticket-triage/cases.jsonl"


def case_input(index: int = 0) -> dict[str, Any]:
    """Return the input of one catalog case of ticket-triage."""
    lines = [ln for ln in CASES.read_text(encoding="utf-8").splitlines() if ln.strip()]
    data: dict[str, Any] = json.loads(lines[index % len(lines)])["input"]
    return data


def sim_settings(
    sim: RunningSimulator,
    database_url: str,
    certifications_path: Path,
    *,
    route: dict[str, Any] | None = None,
    dispatcher: dict[str, Any] | None = None,
    primary_timeout: float = 10.0,
    fallback_timeout: float = 10.0,
    instance_id: str = "gw-test",
) -> Settings:
    """Return settings routing every contract to simulated providers on two wire protocols."""
    return Settings.model_validate(
        {
            "database_url": database_url,
            "instance_id": instance_id,
            "certifications_path": str(certifications_path),
            "providers": {
                "sim-openai": {
                    "protocol": "openai",
                    "base_url": sim.provider_url("sim-openai", "openai"),
                    "model": "sim-gpt",
                    "timeout": primary_timeout,
                },
                "sim-anthropic": {
                    "protocol": "anthropic",
                    "base_url": sim.provider_url("sim-anthropic", "anthropic"),
                    "model": "sim-claude",
                    "timeout": fallback_timeout,
                },
            },
            "routes": {
                "*": {"primary": "sim-openai", "fallbacks": ["sim-anthropic"], **(route or {})}
            },
            "dispatcher": {
                "runners": 4,
                "lease_ttl": 5.0,
                "poll_interval": 0.5,
                "reap_interval": 0.2,
                "shutdown_grace": 2.0,
                **(dispatcher or {}),
            },
        }
    )


def certify(
    path: Path,
    providers: Sequence[ProviderConfig],
    contracts: Sequence[str] = (),
    *,
    certified_ago: dt.timedelta = dt.timedelta(0),
    valid_for: dt.timedelta = dt.timedelta(days=1),
    run_id: str | None = None,
    usage: Mapping[str, Any] | None = None,
) -> None:
    """Write passing live certificates for ``providers`` on every (or the named) contract,
    certified ``certified_ago`` and expiring ``valid_for`` after that (negative: past).

    ``usage`` (a certificate's ``usage``, as ``certify.usage.UsageSummary.as_dict`` writes
    it) is recorded on each, judged against the contract's budget: a usage over it makes
    the certificate fail on the budget layer, as ``onejob certify`` would. Without it (the
    default) a certificate has no usage, like one written before budgets."""
    catalog = load_catalog()
    now = dt.datetime.now(dt.UTC) - certified_ago
    stamp = now.isoformat().replace("+00:00", "Z")
    expires = (now + valid_for).isoformat().replace("+00:00", "Z")
    CertificationRegistry(path).record(
        [
            {
                "contract": name,
                "contract_fingerprint": catalog[name].fingerprint,
                "provider": cfg.name,
                "protocol": cfg.protocol,
                "model": cfg.model,
                "adapter_version": adapter_version_of(cfg.protocol),
                "mode": "live",
                "verdict": "pass",
                "certified_at": stamp,
                "expires_at": expires,
                "repeats": 1,
                "cases": 1,
                "pass_rates": {},
                "failures": [],
                **({"run_id": run_id} if run_id else {}),
                **(_judged_usage(catalog[name].budget, usage) if usage is not None else {}),
                # Stand-in agreement evidence: every case agrees (on nothing).
                "evidence": {case.id: {"agree": {}} for case in catalog[name].cases},
            }
            for name in (contracts or sorted(catalog))
            for cfg in providers
        ]
    )


def _judged_usage(budget: Budget, usage: Mapping[str, Any]) -> dict[str, Any]:
    """Return a certificate's ``usage`` and ``budget``, and, when the usage is over the
    budget, its failed verdict (``certify.usage.check_budget`` in short)."""
    over = budget.over(usage_figures(usage))
    reason = "; ".join(f"{key} is over the budget of {budget.as_dict()[key]:g}" for key in over)
    declared = {k: v for k, v in budget.as_dict().items() if v is not None}
    out: dict[str, Any] = {
        "usage": dict(usage),
        "budget": {"declared": declared, "passed": not over, "reason": reason},
    }
    if over:
        out["verdict"] = "fail"
        out["failures"] = [{"case": "(all)", "layer": "budget", "reason": reason, "excerpt": ""}]
    return out


@dataclasses.dataclass
class RunningGateway:
    """A served gateway app and an HTTP client for it."""

    base_url: str
    client: httpx.AsyncClient
    settings: Settings
    metrics: Metrics


@contextlib.asynccontextmanager
async def run_gateway(
    settings: Settings, *, background: Sequence[ServiceFactory] | None = None
) -> AsyncIterator[RunningGateway]:
    """Serve ``create_app(settings)`` (with its dispatcher) on a free loopback port."""
    metrics = Metrics()
    # background None: the app wires its own LISTEN relay and dispatcher, as `onejob serve`.
    app = create_app(settings, metrics=metrics, background=background)
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_keep_alive=settings.keep_alive_s,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(STARTUP_TIMEOUT):
            while not server.started:
                if task.done():
                    task.result()
                    raise RuntimeError("the gateway stopped while starting")
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, timeout=30.0) as client:
            yield RunningGateway(base, client, settings, metrics)
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 20.0)


class Api:
    """Speak the gateway's HTTP API as one owner (and an admin)."""

    def __init__(self, gateway: RunningGateway, key: str, admin_key: str) -> None:
        self.gw = gateway
        self.auth = {"Authorization": f"Bearer {key}"}
        self.admin = {"Authorization": f"Bearer {admin_key}"}
        self._n = 0

    async def create(
        self,
        input: Any,
        *,
        key: str | None = None,
        wait: int | None = None,
        contract: str = CONTRACT,
    ) -> httpx.Response:
        self._n += 1
        headers = {**self.auth, "Idempotency-Key": key or f"k-{self._n}-{id(self)}"}
        if wait is not None:
            headers["Prefer"] = f"wait={wait}"
        return await self.gw.client.post(
            "/v1/jobs", json={"contract": contract, "input": input}, headers=headers
        )

    async def job(self, job_id: str, *, wait: int | None = None) -> httpx.Response:
        headers = dict(self.auth)
        if wait is not None:
            headers["Prefer"] = f"wait={wait}"
        return await self.gw.client.get(f"/v1/jobs/{job_id}", headers=headers)

    async def until(self, job_id: str, predicate: Any, timeout: float = 10.0) -> dict[str, Any]:
        """Poll the job (bounded) until ``predicate(job)`` holds; return it."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            body: dict[str, Any] = (await self.job(job_id)).json()
            if predicate(body):
                return body
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"job never reached the expected state: {body}")
            await asyncio.sleep(0.05)


SimControl = SimulatorControl  # the shipped control client; the tests keep their short name


@contextlib.asynccontextmanager
async def open_sim_control(sim: RunningSimulator) -> AsyncIterator[SimulatorControl]:
    """Yield the simulator's control client over a client of its own, closed afterwards."""
    async with httpx.AsyncClient(base_url=sim.base_url, timeout=10.0) as client:
        yield SimulatorControl(client)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def _toml_table(prefix: str, data: dict[str, Any], out: list[str]) -> None:
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict) and v is not None}
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    if prefix and (scalars or not tables):
        out.append(f"[{prefix}]")
    out.extend(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in scalars.items())
    for key, table in tables.items():
        _toml_table(f"{prefix}.{json.dumps(key)}" if prefix else json.dumps(key), table, out)


def write_config(path: Path, settings: Settings, **drop: bool) -> Path:
    """Write ``settings`` as an ``onejob.toml`` a subprocess can load (without ``instance_id``)."""
    data = settings.model_dump(mode="json", exclude={"instance_id", *drop})
    lines: list[str] = []
    _toml_table("", data, lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def free_port() -> int:
    """Return a loopback port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def eventually(probe: Any, timeout: float, what: str) -> Any:
    """Await ``probe()`` until it returns something truthy, at most ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
