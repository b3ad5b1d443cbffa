"""``onejob certify --production N`` (issue 48): a fallback judged on real jobs' inputs.

A simulator on loopback answers as three providers: ``primary`` (faithful), ``cache`` (the
``suite-cache`` profile: right on whatever resembles a catalog case, wrong on a must-agree
field elsewhere) and ``honest`` (faithful). A SQLite database holds a few hundred
succeeded ticket-triage jobs the primary answered, their inputs written by the seeded
traffic generator (``certify.traffic``): in the main test sent through a served gateway
(its dispatcher calls the primary and stores its answers), elsewhere written straight
into the store with the primary's (faithful) answers. Certified on the
catalog and its variants, ``cache`` passes; with ``--production 50`` it is refused, naming
the field, while nothing reaches the primary. ``honest`` stays certified run after run.
"""

from __future__ import annotations

import asyncio
import io
import json
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "dispatch"))  # the dispatcher's harness

from dispatch_harness import Api, run_gateway

from certify.traffic import ticket_traffic
from cli.certify import certify, certify_due, cmd_can_i_failover
from cli.recertify import pass_arguments
from contracts.loader import load_catalog
from contracts.variants import draw_variants
from gateway.domain.fingerprint import fingerprint
from gateway.domain.records import ClaimSpec, NewJob
from gateway.settings import DatabaseConfig, Settings, ShortcutsConfig
from gateway.store import open_store
from providers.simulator import RunningSimulator, run_simulator

from .conftest import parse

pytestmark = pytest.mark.slow
CATALOG = load_catalog()
TRIAGE, INVOICE = "ticket-triage@1", "invoice-extraction@1"
JOBS = 300  # succeeded ticket-triage jobs of real-looking traffic
CLAIM = ClaimSpec(worker_id="w", lease_ttl=60.0, deadline_s=30.0)
PROFILES = {"primary": "faithful", "cache": "suite-cache", "honest": "faithful"}
FAITHFUL_RUNS = 20
TRAFFIC_IN_FLIGHT = 10  # jobs sent at once through the served gateway


async def succeed(url: str, contract: str, inputs: list[dict[str, Any]]) -> None:
    """Store a succeeded job per input, with the primary's (faithful) answer as its result."""
    store = await open_store(
        url, shortcuts=ShortcutsConfig.from_env(), database=DatabaseConfig.from_env()
    )
    try:
        for n, value in enumerate(inputs):
            job = NewJob(
                owner_id="alice",
                idempotency_key=f"{contract}-{n}",
                fingerprint=fingerprint(contract, value, None),
                contract=contract,
                provider="primary",
                requested_provider=None,
                input=value,
            )
            created = await store.create_or_get(job, CLAIM)
            assert created.claimed is not None
            await store.finalize(created.claimed.attempt.id, CATALOG[contract].simulate(value))
    finally:
        await store.close()


async def serve(settings: Settings, contract: str, inputs: list[dict[str, Any]]) -> None:
    """Send one job per input through a served gateway; each must succeed on the primary."""
    store = await open_store(
        settings.database_url,
        shortcuts=ShortcutsConfig.from_env(),
        database=DatabaseConfig.from_env(),
    )
    try:
        _, key = await store.create_api_key("alice", frozenset({"jobs"}))
    finally:
        await store.close()
    async with run_gateway(settings) as gw:
        api = Api(gw, key, key)
        for start in range(0, len(inputs), TRAFFIC_IN_FLIGHT):
            answers = await asyncio.gather(
                *(api.create(value, wait=10, contract=contract)
                  for value in inputs[start : start + TRAFFIC_IN_FLIGHT])
            )  # fmt: skip
            for answer in answers:
                job = answer.json()
                assert (job["status"], job["attempts"][-1]["provider"]) == ("succeeded", "primary")


@pytest.fixture
async def world(
    request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path
) -> AsyncIterator[tuple[RunningSimulator, Settings]]:
    """The simulator and the settings, with the jobs in the database: written straight into
    the store, or (``served``, parametrized indirectly) sent through a served gateway."""
    served = getattr(request, "param", None) == "served"
    path = tmp_path / "onejob.db"
    shutil.copyfile(sqlite_template, path)
    url = f"sqlite+aiosqlite:///{path}"
    traffic = ticket_traffic(CATALOG[TRIAGE], "issue-48", JOBS)
    if not served:
        await succeed(url, TRIAGE, traffic)
    # A new route: five jobs only (variants of the catalog's invoices).
    await succeed(url, INVOICE, [v.input for v in draw_variants(CATALOG[INVOICE], "new", 5)])
    async with run_simulator(port=0, profiles=PROFILES, catalog=load_catalog) as sim:
        providers = {
            name: {"protocol": "openai", "model": "sim-gpt", "timeout": 10.0,
                   "context_window": 16_384, "base_url": sim.provider_url(name, "openai")}
            for name in PROFILES
        }  # fmt: skip
        settings = Settings.model_validate(
            {
                "database_url": url,
                "certifications_path": str(tmp_path / "certs.json"),
                "providers": providers,
                "routes": {"*": {"primary": "primary", "fallbacks": ["cache", "honest"]}},
                "certification": {"production_contracts": [TRIAGE, INVOICE]},
            }
        )
        if served:
            await serve(settings, TRIAGE, traffic)
        yield sim, settings


def certificates(settings: Settings) -> list[dict[str, Any]]:
    certs: list[dict[str, Any]] = json.loads(Path(settings.certifications_path).read_text())[
        "certificates"
    ]
    return certs


def written_text(settings: Settings, reports: Path) -> str:
    """Return everything the run wrote: the registry and every report."""
    files = [Path(settings.certifications_path), *reports.iterdir()]
    return "".join(p.read_text() for p in files)


async def run(settings: Settings, tmp: Path, *argv: str) -> tuple[int, str]:
    args = parse(
        "certify", "--repeats", "1", "--registry", settings.certifications_path,
        "--report-dir", str(tmp / "out"), *argv,
    )  # fmt: skip
    args.settings = settings
    out = io.StringIO()
    code = await certify(args, out, io.StringIO())
    return code, out.getvalue()


@pytest.mark.parametrize("world", ["served"], indirect=True)
async def test_a_fallback_that_learnt_the_suite_is_certified_today_and_refused_on_production(
    world: tuple[RunningSimulator, Settings], tmp_path: Path
) -> None:
    sim, settings = world
    contract = CATALOG[TRIAGE]
    code, said = await run(settings, tmp_path, "--provider", "cache", "--contract", TRIAGE)
    assert code == 0, said  # the catalog's cases and the variants keep the answer: it passes

    primary_calls, cache_calls = len(sim.calls("primary")), len(sim.calls("cache"))
    code, said = await run(
        settings, tmp_path, "--provider", "cache", "--contract", TRIAGE, "--production", "50"
    )
    assert code == 1, said
    assert "production: 50 extra call(s) to the fallbacks, none to a primary" in said
    assert (
        "cache on ticket-triage@1: production sample 50/50 of primary's jobs: 50 judged, "
        "50 disagreed (100%, on category"
    ) in said
    assert "refused at 20% with 20 judged" in said
    assert primary_calls == JOBS  # the traffic, served by the gateway
    assert len(sim.calls("primary")) == primary_calls  # the run sent nothing to the primary
    extra = 1 + len(contract.cases) + contract.variants_per_run + 50  # 1: the preflight probe
    assert len(sim.calls("cache")) - cache_calls == extra

    certs = certificates(settings)
    cert = next(c for c in certs if c["provider"] == "cache" and c["run_id"] in said)
    assert cert["verdict"] == "fail"
    [sample] = cert["production"]
    assert sample["fields"]["category"] == 50 and sample["verdict"] == "refused"
    assert (sample["wanted"], sample["drawn"], sample["judged"]) == (50, 50, 50)
    [failure] = [f for f in cert["failures"] if f["layer"] == "production"]
    assert failure["case"] == "(production)" and "on category (50)" in failure["reason"]
    # Field names and hashes only: no production input or result reached the registry or
    # the reports.
    report = json.loads((tmp_path / "out" / "contracts.json").read_text())
    assert report["calls"]["production"] == 50
    [unit] = report["units"]
    assert unit["production"][0]["fields"]["category"] == 50
    assert "50 extra call(s) to the fallbacks" in (tmp_path / "out" / "contracts.html").read_text()
    written = written_text(settings, tmp_path / "out")
    for value in ticket_traffic(contract, "issue-48", JOBS)[-50:]:
        assert value["ticket_id"] not in written and value["subject"] not in written

    out = io.StringIO()
    args = parse("can-i-failover", "--contract", TRIAGE, "--from", "primary", "--to", "cache")
    args.registry, args.settings = settings.certifications_path, settings
    assert cmd_can_i_failover(args, out) == 1
    assert out.getvalue().startswith("no: failed")
    assert "production sample 50/50 of primary's jobs: 50 judged, 50 disagreed" in out.getvalue()


async def test_a_faithful_fallback_stays_certified_on_production_run_after_run(
    world: tuple[RunningSimulator, Settings], tmp_path: Path
) -> None:
    sim, settings = world
    for n in range(FAITHFUL_RUNS):
        code, said = await run(
            settings, tmp_path, "--provider", "honest", "--contract", TRIAGE, "--production", "50"
        )
        assert code == 0, (n, said)
        assert "50 judged, 0 disagreed (0%); passed at 20% with 20 judged" in said
    assert sim.calls("primary") == []


async def test_fewer_jobs_than_asked_are_recorded_and_judged_only_from_min_samples(
    world: tuple[RunningSimulator, Settings], tmp_path: Path
) -> None:
    _, settings = world
    code, said = await run(
        settings, tmp_path, "--provider", "cache", "--contract", INVOICE,
        "--contract", "reply-draft@1", "--production", "50", "--variants", "0",
    )  # fmt: skip
    assert (
        "cache on invoice-extraction@1: production sample 5/50 of primary's jobs: 5 judged, "
        "0 disagreed; not judged (fewer than 20 judged): certified on the catalog and its "
        "variants alone"
    ) in said
    assert (
        "cache on reply-draft@1: production sample of primary's jobs: skipped (not hedgeable"
        in said
    )
    certs = certificates(settings)
    invoice = next(c for c in certs if c["provider"] == "cache" and c["contract"] == INVOICE)
    assert invoice["verdict"] == "pass" and invoice["production"][0]["verdict"] == "not judged"

    opted_out = settings.model_copy(
        update={"certification": settings.certification.model_copy(
            update={"production_contracts": ()})}
    )  # fmt: skip
    code, said = await run(
        opted_out, tmp_path, "--provider", "cache", "--contract", TRIAGE, "--production", "50"
    )
    assert code == 0
    assert "skipped (ticket-triage@1 is not in [certification] production_contracts" in said


async def test_the_workers_pass_sends_production_inputs_when_configured(
    world: tuple[RunningSimulator, Settings], tmp_path: Path
) -> None:
    sim, settings = world
    # Certified on the catalog alone, for two days: due at the worker's next pass.
    code, said = await run(
        settings, tmp_path, "--provider", "cache", "--contract", TRIAGE, "--validity-days", "2"
    )
    assert code == 0, said
    assert pass_arguments(settings).production == 0  # off by default
    worker = settings.model_copy(
        update={"certification": settings.certification.model_copy(
            update={"production": 50, "repeats": 1, "report_dir": str(tmp_path / "pass")})}
    )  # fmt: skip
    args = pass_arguments(worker)
    args.contract = [TRIAGE]
    out = io.StringIO()
    assert await certify_due(args, out) == 1
    assert "cache on ticket-triage@1: production sample 50/50 of primary's jobs" in out.getvalue()
    assert sim.calls("primary") == []


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (("--sim",), "--production needs the gateway's database and routes"),
        (("--mode", "replay"), "--production needs --mode live"),
    ],
)
async def test_production_is_refused_where_it_cannot_run(
    tmp_path: Path, argv: tuple[str, ...], why: str
) -> None:
    args = parse(
        "certify", "--production", "5", "--registry", str(tmp_path / "c.json"),
        "--report-dir", str(tmp_path / "out"), *argv,
    )  # fmt: skip
    err = io.StringIO()
    assert await certify(args, io.StringIO(), err) == 2
    assert why in err.getvalue()
