"""Fixtures for the console's browser tests: a served gateway with its dispatcher, the
simulator, certificates, keys, and Playwright driving Debian's Chromium (no download).

The gateway runs on SQLite only: the console is a client of the HTTP API, whose store
behaviour the other integration tests cover on both databases.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The gateway/simulator harness of the dispatcher tests is reused, not copied.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dispatch"))

import dataclasses
import datetime as dt
import shutil
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from dispatch_harness import (
    Api,
    RunningGateway,
    SimControl,
    certify,
    open_sim_control,
    run_gateway,
    sim_settings,
)
from playwright.async_api import Browser, ConsoleMessage, Locator, Page, async_playwright

from contracts.loader import load_catalog as contract_catalog
from contracts.registry import CertificationRegistry
from contracts.registry_file import iso
from gateway.domain.fingerprint import fingerprint
from gateway.domain.ports import ShadowStore
from gateway.domain.records import ClaimSpec, NewJob
from gateway.domain.shadow_records import ShadowOutcome
from gateway.settings import DatabaseConfig, ShadowConfig, ShortcutsConfig
from gateway.store import open_store
from providers.simulator.server import RunningSimulator, run_simulator

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOTS = Path(__file__).resolve().parents[3] / "reports/out/console"
PRIMARY_TIMEOUT = 4.0  # seconds: a hang past this makes the attempt unknown
DESKTOP = {"width": 1280, "height": 800}

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    """A fresh migrated SQLite database."""
    path = tmp_path / "onejob.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite+aiosqlite:///{path}"


@dataclasses.dataclass
class Stack:
    """A served gateway, its simulator's control API, and an owner's and an admin's keys."""

    gw: RunningGateway
    sim: SimControl
    key: str
    admin_key: str

    @property
    def url(self) -> str:
        return f"{self.gw.base_url}/console"

    def api(self, admin: bool = False) -> Api:
        """Speak the API as the owner (``alice``), or as the admin (``ops``)."""
        return Api(self.gw, self.admin_key if admin else self.key, self.admin_key)


@pytest.fixture
async def stack(sqlite_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """Gateway + dispatcher + simulator; both simulated providers certified for failover."""
    store = await open_store(
        sqlite_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        _, key = await store.create_api_key("alice", frozenset({"jobs"}))
        _, admin = await store.create_api_key("ops", frozenset({"jobs", "admin"}))
    finally:
        await store.close()
    async with (
        run_simulator(port=0, catalog=contract_catalog) as sim,
        open_sim_control(sim) as control,
    ):
        settings = _settings(sim, sqlite_url, tmp_path)
        certify(tmp_path / "certs.json", list(settings.providers.values()))
        async with run_gateway(settings) as gw:
            yield Stack(gw, control, key, admin)


#: ``capacity_stack``'s circuit breaker: open after 3 failures in a row, and for longer than
#: a test runs (the default 5 s would close it under the browser's feet).
BREAKER = {"breaker_failures": 3, "breaker_open": 600.0}


@pytest.fixture
async def capacity_stack(sqlite_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """Gateway + dispatcher + simulator with no certificate at all, so no fallback can take
    a job its provider said not now to: the job waits for that provider (issue 43). Its
    circuit breaker is ``BREAKER``."""
    store = await open_store(
        sqlite_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        _, key = await store.create_api_key("alice", frozenset({"jobs"}))
        _, admin = await store.create_api_key("ops", frozenset({"jobs", "admin"}))
    finally:
        await store.close()
    async with (
        run_simulator(port=0, catalog=contract_catalog) as sim,
        open_sim_control(sim) as control,
    ):
        settings = _settings(sim, sqlite_url, tmp_path)
        breaker = settings.capacity.model_copy(update=BREAKER)
        settings = settings.model_copy(update={"capacity": breaker})
        async with run_gateway(settings) as gw:
            yield Stack(gw, control, key, admin)


#: The registry of ``attention_stack``: one pair suspended by shadow checks, one
#: certificate about to expire, one expired (``docs/console.md``, failover matrix).
SUSPENDED = {"contract": "ticket-triage@1", "primary": "sim-openai", "fallback": "sim-anthropic"}
SHADOW = {"sample_rate": 0.25, "threshold": 0.2, "min_samples": 20}


@pytest.fixture
async def attention_stack(sqlite_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """Gateway + simulator with shadow checks on, and a registry that needs attention:

    - ticket-triage@1: both certified two days ago for 30 days; 20 shadow checks in the
      database, 9 disagreeing on ``category``; the pair suspended (``CertificationRegistry
      .suspend``, as the shadow checks write it);
    - invoice-extraction@1: sim-anthropic's certificate expires in 3 days (re-certify
      due); 5 shadow checks, 1 disagreeing on ``total``: below ``min_samples``;
    - reply-draft@1 (not hedgeable: no shadow checks): sim-openai's certificate expired
      a day ago; sim-anthropic's failed its budget (p95 41 s against 30 s), so the pair
      is refused as ``failed``.

    Latency and cost (``usage``): ticket-triage's fallback answers at p95 1.2 s and
    $0.0004 a case against its primary's 400 ms and $0.0001; invoice-extraction's
    certificates were written without usage (as before budgets); reply-draft's fallback is
    over the latency budget, with no price known.
    """
    store = await open_store(
        sqlite_url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        _, key = await store.create_api_key("alice", frozenset({"jobs"}))
        _, admin = await store.create_api_key("ops", frozenset({"jobs", "admin"}))
        assert isinstance(store, ShadowStore)
        await _shadow_checked(store, "ticket-triage@1", 20, {"category": 9})
        await _shadow_checked(store, "invoice-extraction@1", 5, {"total": 1})
    finally:
        await store.close()
    async with (
        run_simulator(port=0, catalog=contract_catalog) as sim,
        open_sim_control(sim) as control,
    ):
        settings = _settings(sim, sqlite_url, tmp_path)
        settings = settings.model_copy(update={"shadow": ShadowConfig(**SHADOW)})
        path = tmp_path / "certs.json"
        providers = list(settings.providers.values())
        two_days = dt.timedelta(days=2)
        month = dt.timedelta(days=30)
        certify(path, providers[:1], ["ticket-triage@1"], certified_ago=two_days, valid_for=month,
                usage=usage(p50=180, p95=400, tokens=62, cost=0.0001))  # fmt: skip
        certify(path, providers[1:], ["ticket-triage@1"], certified_ago=two_days, valid_for=month,
                run_id="cert-fallback",
                usage=usage(p50=700, p95=1200, tokens=75, cost=0.0004))  # fmt: skip
        certify(path, providers[:1], ["invoice-extraction@1"], certified_ago=two_days,
                valid_for=month)  # fmt: skip
        certify(path, providers[1:], ["invoice-extraction@1"], certified_ago=dt.timedelta(days=27),
                valid_for=month, run_id="cert-soon")  # fmt: skip
        certify(path, providers[:1], ["reply-draft@1"], certified_ago=dt.timedelta(days=31),
                valid_for=month,
                usage=usage(p50=2_000, p95=6_500, tokens=240, cost=0.0009))  # fmt: skip
        certify(path, providers[1:], ["reply-draft@1"], certified_ago=two_days, valid_for=month,
                usage=usage(p50=12_000, p95=41_000, tokens=410, cost=None))  # fmt: skip
        registry = CertificationRegistry(path)
        fallback = registry.latest_certificate("ticket-triage@1", "sim-anthropic")
        assert fallback is not None
        registry.suspend(
            {
                **SUSPENDED,
                "since": iso(dt.datetime.now(dt.UTC) - dt.timedelta(hours=3)),
                "reason": "shadow checks disagree",
                "disagreement_rate": 0.45,
                "checks": 20,
                "disagreements": 9,
                "threshold": SHADOW["threshold"],
                "min_samples": SHADOW["min_samples"],
                "fields": {"category": 9},
                "fallback_run_id": "cert-fallback",
                "fallback_certified_at": fallback["certified_at"],
                "by": "gw-test",
            }
        )
        async with run_gateway(settings) as gw:
            yield Stack(gw, control, key, admin)


def usage(*, p50: float, p95: float, tokens: float, cost: float | None) -> dict[str, Any]:
    """A certificate's ``usage`` as ``onejob certify`` writes it (``UsageSummary.as_dict``):
    25 calls, latency in milliseconds, output tokens and cost (None: no price) per case."""
    return {
        "calls": 25,
        "answered": 25,
        "latency_ms": {"p50": float(p50), "p95": float(p95), "p99": float(p95), "max": float(p95)},
        "output_tokens_per_case": float(tokens),
        "output_tokens_max": int(tokens * 1.5),
        "input_tokens": 25 * 400,
        "output_tokens": int(25 * tokens),
        "cost_per_case_usd": cost,
        "cost_usd": None if cost is None else round(25 * cost, 6),
        "price_per_mtok": None if cost is None else {"input": 0.5, "output": 1.5},
    }


async def _shadow_checked(
    store: Any, contract: str, checks: int, disagreed: dict[str, int]
) -> None:
    """Record ``checks`` judged shadow checks of the pair on ``contract``'s succeeded jobs,
    the first ``sum(disagreed)`` disagreeing on the named fields."""
    fields = [name for name, n in disagreed.items() for _ in range(n)]
    for n in range(checks):
        value = {"n": n}
        created = await store.create_or_get(
            NewJob("alice", f"{contract}-{n}", fingerprint(contract, value, None), contract,
                   "sim-openai", None, value),
            ClaimSpec(worker_id="seed", lease_ttl=60.0, deadline_s=30.0),
        )  # fmt: skip
        assert created.claimed is not None
        await store.finalize(created.claimed.attempt.id, {"seeded": True})
        claimed = await store.begin_shadow_check(
            created.job.id, contract, SUSPENDED["primary"], SUSPENDED["fallback"]
        )
        assert claimed is not None
        outcome = ShadowOutcome.DISAGREED if n < len(fields) else ShadowOutcome.AGREED
        detail = {"fields": [fields[n]] if n < len(fields) else []}
        await store.finish_shadow_check(claimed[0], outcome, detail)


def _settings(sim: RunningSimulator, url: str, tmp_path: Path) -> Any:
    return sim_settings(
        sim, url, tmp_path / "certs.json", primary_timeout=PRIMARY_TIMEOUT, fallback_timeout=5.0
    )


@dataclasses.dataclass
class Watched:
    """What a page did that a test must check: console errors, CSP refusals, request URLs."""

    errors: list[str] = dataclasses.field(default_factory=list)
    urls: list[str] = dataclasses.field(default_factory=list)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """Debian's Chromium through Playwright (``executable_path``: no browser download)."""
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(
            executable_path=CHROMIUM,
            # Root in a container: Chromium's sandbox needs user namespaces it may not have.
            args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
def open_page(browser: Browser) -> Callable[..., Any]:
    """Return ``open_page(viewport)``: a fresh page (own session) and what it did."""

    async def open_(viewport: dict[str, int] = DESKTOP) -> tuple[Page, Watched]:
        context = await browser.new_context(viewport=viewport)  # type: ignore[arg-type]
        page = await context.new_page()
        watched = Watched()

        def on_console(msg: ConsoleMessage) -> None:
            # CSP refusals and script errors arrive as console errors; an HTTP error status
            # the page handles (401 on a wrong key, 422 on a bad result) is not one.
            if msg.type == "error" and not msg.text.startswith("Failed to load resource"):
                watched.errors.append(msg.text)

        page.on("console", on_console)
        page.on("pageerror", lambda exc: watched.errors.append(f"page error: {exc}"))
        page.on("request", lambda request: watched.urls.append(request.url))
        return page, watched

    return open_


@pytest.fixture
def shoot() -> Callable[..., Any]:
    """Return ``shoot(page, name[, element])``: a full-page screenshot (or one of
    ``element``, to look at a part of a long page at its real size) in
    ``reports/out/console/``."""

    async def shoot_(page: Page, name: str, element: Locator | None = None) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        if element is not None:
            await element.screenshot(path=str(path))
        else:
            await page.screenshot(path=str(path), full_page=True)
        return path

    return shoot_
