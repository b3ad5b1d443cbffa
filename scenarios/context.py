"""What a scenario body works with: processes, a recording HTTP client, checks, a timeline.

The façade over three parts: the recording client (:mod:`scenarios.recorder`), the
simulator's control client (:mod:`providers.simulator.control_client`) and the timeline
(:mod:`scenarios.timeline`). Responses are read in the shapes docs/api.md documents; a
missing key fails the scenario.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from providers.simulator.control_client import SimulatorControl
from scenarios.harness import Harness, HarnessError, Process
from scenarios.model import Check, Exchange, TimelineMark
from scenarios.recorder import REQUEST_TIMEOUT, ExchangeRecorder, exchange_options
from scenarios.setup import GatewayConfig, database_kind, fresh_database
from scenarios.timeline import Timeline
from scenarios.workload import sample_input


class ScenarioFailure(Exception):
    """A check did not hold; the message says which and why."""


class ScenarioSkipped(Exception):
    """A prerequisite is missing; the message says which."""


class ScenarioContext:
    """One scenario's processes, HTTP exchanges, checks and timeline."""

    def __init__(
        self,
        name: str,
        harness: Harness,
        database_url: str | None,
        registry_factory: Callable[[ScenarioContext], Awaitable[Path]],
    ) -> None:
        self.name = name
        self.harness = harness
        self.database_url = database_url
        self.db_kind = database_kind(database_url)
        self.t0 = time.time()
        self.checks: list[Check] = []
        self.notes: list[str] = []
        self._timeline = Timeline(self.t0)
        self._recorder = ExchangeRecorder(self.now)
        self._registry_factory = registry_factory
        self._drops: list[Callable[[], Awaitable[None]]] = []
        self._watched: list[tuple[Process, str, str, Process | None, str]] = []
        #: every request sent with it is recorded (see :mod:`scenarios.recorder`)
        self.http = self._recorder.client()
        self._quiet = httpx.AsyncClient(timeout=REQUEST_TIMEOUT)  # polls the simulator's log

    @property
    def exchanges(self) -> list[Exchange]:
        """The exchanges recorded so far, in the order their responses arrived."""
        return self._recorder.exchanges

    @property
    def timeline(self) -> list[TimelineMark]:
        """The timeline's marks (a scenario may append its own)."""
        return self._timeline.marks

    @property
    def timeline_source(self) -> str:
        """What the timeline was built from."""
        return self._timeline.source

    # -- time and checks -------------------------------------------------------------

    def now(self) -> float:
        """Return seconds since the scenario started."""
        return time.time() - self.t0

    def rel(self, unix: float) -> float:
        """Turn a unix time into seconds since the scenario started."""
        return self._timeline.rel(unix)

    def expect(self, ok: bool, what: str, detail: str = "") -> None:
        """Record a check; stop the scenario with FAIL when it does not hold."""
        self.checks.append(Check(what=what, ok=bool(ok), detail=detail))
        if not ok:
            raise ScenarioFailure(f"{what}: {detail}" if detail else what)

    def note(self, text: str) -> None:
        """Record something a reader of the report should know."""
        self.notes.append(text)

    def action(self, label: str) -> None:
        """Put something the scenario did on the timeline."""
        self._timeline.action(self.now(), label)

    # -- processes -------------------------------------------------------------------

    async def fresh_db(self, tag: str = "db") -> str:
        """Create a fresh database for this scenario and return its URL."""
        url, drop = await fresh_database(
            self.database_url, self.harness.work_dir, f"{self.name}-{tag}"
        )
        self._drops.append(drop)
        return url

    async def simulator(self, name: str = "sim", port: int | None = None) -> Process:
        """Start a simulator process."""
        return await self.harness.start_simulator(name, port)

    async def gateway(
        self, name: str, config: GatewayConfig, database_url: str, port: int | None = None
    ) -> Process:
        """Write ``config`` and start a gateway process on ``database_url``."""
        path = config.write(self.harness.work_dir / f"{name}.toml")
        return await self.harness.start_gateway(name, path, database_url, port)

    async def certified_registry(self) -> Path:
        """Return a registry file certifying the simulated providers (made once per run)."""
        return await self._registry_factory(self)

    def empty_registry(self, name: str = "empty-registry.json") -> Path:
        """Write a registry with no certificates and return its path."""
        path = self.harness.work_dir / name
        path.write_text(json.dumps({"format": "onejob.certifications/1", "certificates": []}))
        return path

    async def close(self) -> None:
        """Stop processes, drop databases and close the clients."""
        await self.http.aclose()
        await self._quiet.aclose()
        await self.harness.close()
        for drop in self._drops:
            try:
                await drop()
            except Exception as exc:  # a leftover database is untidy, not a verdict
                self.note(f"could not drop a scenario database: {exc}")

    # -- HTTP ------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        url: str,
        *,
        actor: str = "client",
        key: str | None = None,
        json_body: Any = None,
        headers: dict[str, str] | None = None,
        record: bool = True,
        timeout: float = REQUEST_TIMEOUT,
    ) -> httpx.Response:
        """Send one request (recorded unless ``record`` is False) and return the response."""
        sent_headers = dict(headers or {})
        if key is not None:
            sent_headers["Authorization"] = f"Bearer {key}"
        try:
            return await self.http.request(
                method,
                url,
                json=json_body,
                headers=sent_headers,
                timeout=timeout,
                extensions=exchange_options(actor, record),
            )
        except httpx.RequestError as exc:
            self._recorder.failed(exc)
            raise

    async def contract(self, gateway: Process, key: str, hedgeable: bool = False) -> str:
        """Pick a contract the gateway offers (a hedgeable one when asked)."""
        response = await self.request(
            "GET", f"{gateway.base_url}/v1/contracts", key=key, record=False
        )
        if response.status_code != 200:
            raise HarnessError(f"GET /v1/contracts answered {response.status_code}")
        contracts = listed(response, "contracts")
        names = sorted((str(c["name"]), bool(c["hedgeable"])) for c in contracts)
        preferred = [n for n, h in names if h or not hedgeable]
        if not preferred:
            raise ScenarioSkipped("no hedgeable contract in the catalog")
        for candidate in ("ticket-triage@1", *preferred):
            if candidate in preferred:
                return candidate
        return preferred[0]

    def job_body(self, contract: str, seed: int = 0, provider: str | None = None) -> dict[str, Any]:
        """Return a ``POST /v1/jobs`` body for ``contract`` with a valid input."""
        body: dict[str, Any] = {"contract": contract, "input": sample_input(contract, seed)}
        if provider is not None:
            body["provider"] = provider
        return body

    async def wait_job(
        self,
        gateway: Process,
        key: str,
        job_id: str,
        until: Callable[[dict[str, Any]], bool],
        timeout: float,
        what: str,
    ) -> dict[str, Any]:
        """Poll ``GET /v1/jobs/{id}`` until ``until(job)`` holds; FAIL when time runs out."""
        deadline = time.monotonic() + timeout
        job: dict[str, Any] = {}
        while time.monotonic() < deadline:
            response = await self.request(
                "GET", f"{gateway.base_url}/v1/jobs/{job_id}", key=key, record=False
            )
            if response.status_code == 200:
                job = response.json()
                if until(job):
                    return job
            await asyncio.sleep(0.1)
        self.expect(False, what, f"not within {timeout:.1f} s; last seen {_brief(job)}")
        return job

    # -- simulator -------------------------------------------------------------------

    async def script(
        self, sim: Process, provider: str | None, behaviours: list[dict[str, Any]], count: int = 1
    ) -> None:
        """Queue simulator behaviours for ``provider`` (recorded as the scenario's exchange)."""
        await SimulatorControl(self.http, sim.base_url).script(provider, *behaviours, count=count)

    async def sim_calls(self, sim: Process, provider: str | None = None) -> list[dict[str, Any]]:
        """Return the simulator's call log (for one provider when named)."""
        return await SimulatorControl(self._quiet, sim.base_url).calls(provider)

    async def reset_simulator(self, sim: Process) -> None:
        """Make the simulator forget every call, script and profile override."""
        await SimulatorControl(self._quiet, sim.base_url).reset()

    async def wait_calls(
        self, sim: Process, count: int, timeout: float, provider: str | None = None
    ) -> list[dict[str, Any]]:
        """Wait until the simulator has received ``count`` calls; return the log."""
        deadline = time.monotonic() + timeout
        calls = await self.sim_calls(sim, provider)
        while len(calls) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            calls = await self.sim_calls(sim, provider)
        return calls

    # -- timeline --------------------------------------------------------------------

    def observe_unknown(self, job: dict[str, Any], label: str = "") -> None:
        """Mark, at this moment, every attempt the scenario has just seen become unknown."""
        self._timeline.seen_unknown(self.now(), job, label)

    def watch(
        self, gateway: Process, key: str, job_id: str, sim: Process | None, label: str = ""
    ) -> None:
        """Put this job on the timeline when the scenario ends, whatever its verdict."""
        self._watched.append((gateway, key, job_id, sim, label))

    async def capture_watched(self) -> None:
        """Capture every watched job not captured yet (skipping those whose gateway is
        gone); a scenario whose gateways go before the runner's capture calls it itself."""
        watched, self._watched = self._watched, []
        for gateway, key, job_id, sim, label in watched:
            if not gateway.running:
                self.note(f"timeline of {job_id} not captured: {gateway.name} is not running")
                continue
            try:
                await self.capture(gateway, key, job_id, sim, label)
            except httpx.HTTPError as exc:
                self.note(f"timeline of {job_id} not captured: {type(exc).__name__}: {exc}")

    async def capture(
        self, gateway: Process, key: str, job_id: str, sim: Process | None, label: str = ""
    ) -> dict[str, Any]:
        """Add the job's attempts, events and provider calls to the timeline; return the job."""
        response = await self.request(
            "GET", f"{gateway.base_url}/v1/jobs/{job_id}", key=key, record=False
        )
        response.raise_for_status()
        job: dict[str, Any] = response.json()
        observed = self.now()
        events = await self._events(gateway, key, job_id)
        calls = await self.sim_calls(sim) if sim is not None else []
        self._timeline.add_job(observed, job_id, job, events, calls, label)
        return job

    async def _events(self, gateway: Process, key: str, job_id: str) -> list[dict[str, Any]] | None:
        response = await self.request(
            "GET", f"{gateway.base_url}/v1/jobs/{job_id}/events", key=key, record=False
        )
        return listed(response, "events") if response.status_code == 200 else None


def listed(response: httpx.Response, key: str) -> list[dict[str, Any]]:
    """Return the list under ``key`` of a documented listing body; FAIL when it is not there."""
    body = response.json()
    items = body.get(key) if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise ScenarioFailure(
            f"{response.request.method} {response.request.url.path} answered without a "
            f"{key!r} list (docs/api.md): {response.text[:200]}"
        )
    return items


def _brief(job: dict[str, Any]) -> str:
    if not job:
        return "no job"
    attempts = ", ".join(
        f"#{a.get('number')} {a.get('provider')} {a.get('state')}" for a in job.get("attempts", [])
    )
    return f"status={job.get('status')} attempts=[{attempts}]"


def brief(job: dict[str, Any]) -> str:
    """Summarize a job body in one line for a check's detail."""
    return _brief(job)


def log_dir_for(report_dir: Path, name: str) -> Path:
    """Return where a scenario's process logs go."""
    return report_dir / "logs" / name


def winner_of(job: dict[str, Any]) -> dict[str, Any]:
    """Return the attempt named by the job's ``completed_by`` (empty when none)."""
    for attempt in job["attempts"]:
        if attempt.get("id") == job.get("completed_by"):
            return dict(attempt)
    return {}


def attempt_number(job: dict[str, Any], number: int) -> dict[str, Any]:
    """Return the job's attempt with ``number`` (empty when missing)."""
    for attempt in job["attempts"]:
        if attempt.get("number") == number:
            return dict(attempt)
    return {}
