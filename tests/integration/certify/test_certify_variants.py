"""Variants through the runner against an in-process simulator (ASGI, no socket).

A faithful provider passes every contract's variants over twenty seeds; a provider that
learnt the catalog is certified on the catalog's cases alone and refused once variants
are drawn, with the variants layer named; the same seed draws the same variants again;
replay without a live simulator skips them and says why.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import httpx
import pytest

from certify.results import CertificationRun, Mode
from certify.runner import NO_LIVE_VARIANTS, Runner
from certify.simulated import sim_profiles, sim_providers
from cli.certify import certify
from contracts.loader import load_catalog
from contracts.registry import CertificationRegistry
from providers.simulator import create_sim_app

from .conftest import parse

pytestmark = pytest.mark.slow
CATALOG = load_catalog()
CONTRACTS = [CATALOG[name] for name in CATALOG]
SIM_URL = "http://simulator.invalid"
SEEDS = 20


def sim_client() -> httpx.AsyncClient:
    app = create_sim_app(profiles=sim_profiles(), catalog=CATALOG)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app))


async def run_sim(
    names: list[str], *, seed: str | None = None, variants: int | None = None, cases: bool = True
) -> CertificationRun:
    providers = sim_providers(SIM_URL)
    async with sim_client() as client:
        runner = Runner(Mode.LIVE, repeats=1, client=client, seed=seed, variants=variants)
        return await runner.run(
            CONTRACTS,
            [providers[n] for n in names],
            pairs=[(names[0], n) for n in names[1:]],
            case_filter=None if cases else (lambda contract, case: False),
        )


async def test_faithful_profiles_pass_every_contracts_variants_over_twenty_seeds() -> None:
    failed: list[str] = []
    drawn: set[str] = set()
    for n in range(SEEDS):
        run = await run_sim(["faithful", "faithful-claude"], seed=f"faithful-{n}", cases=False)
        for unit in run.units:
            assert len(unit.variants) == unit.contract.variants_per_run == 8
            drawn.update(f"{v.case}:{v.variation}" for v in unit.variants)
            failed += [f"seed faithful-{n}: {f['reason']}" for f in unit.failures()]
            for primary, checks in unit.agreement.items():
                failed += [
                    f"{primary} vs {unit.provider.name}: {c.reason}" for c in checks if not c.passed
                ]
    assert failed == []
    assert len(drawn) > SEEDS * 3 * 4  # the seeds drew different variants, not one sample


@pytest.mark.parametrize("memorising", ["catalog-only", "catalog-only-claude"])
async def test_a_provider_that_learnt_the_catalog_is_certified_without_variants_only(
    tmp_path: Path, memorising: str
) -> None:
    providers = sim_providers(SIM_URL)
    before = await run_sim(["faithful", memorising], variants=0)
    after = await run_sim(["faithful", memorising])
    for run, path in ((before, tmp_path / "before.json"), (after, tmp_path / "after.json")):
        CertificationRegistry(path).record([u.certificate() for u in run.units])
    for contract in CONTRACTS:
        was = CertificationRegistry(tmp_path / "before.json").can_failover(
            contract, providers["faithful"], providers[memorising]
        )
        now = CertificationRegistry(tmp_path / "after.json").can_failover(
            contract, providers["faithful"], providers[memorising]
        )
        assert was.allowed, was
        assert not now.allowed and now.reason == "failed"
        assert f"{memorising} on {contract.name} failed certification (variants layer" in str(now)
    for unit in after.units:
        if unit.provider.name == memorising:
            assert all(c.passed for c in unit.cases)
            assert unit.pass_rates()["variants"] == 0.0
            assert {f["layer"] for f in unit.failures()} == {"variants"}


async def test_the_same_seed_draws_the_same_variants_in_another_run(tmp_path: Path) -> None:
    docs = []
    for i in range(2):
        out = io.StringIO()
        args = parse(
            "certify", "--sim", "--mode", "replay", "--provider", "faithful",
            "--contract", "reply-draft@1", "--seed", "cert-20260301T100000Z-0123456789ab",
            "--registry", str(tmp_path / "certs.json"), "--report-dir", str(tmp_path / f"{i}"),
        )  # fmt: skip
        assert await certify(args, out) == 0, out.getvalue()
        docs.append(json.loads((tmp_path / f"{i}" / "contracts.json").read_text()))
    assert docs[0]["run_id"] != docs[1]["run_id"]
    assert docs[0]["seed"] == docs[1]["seed"] == "cert-20260301T100000Z-0123456789ab"
    first, second = (
        [(v["case"], v["relations"], v["agree"]) for v in d["units"][0]["variant_cases"]]
        for d in docs
    )
    assert first == second and len(first) == 8


async def test_replay_without_a_live_simulator_skips_the_variants_and_says_why() -> None:
    provider = sim_providers()["faithful"]
    runner = Runner(Mode.REPLAY, repeats=1)
    run = await runner.run([CATALOG["ticket-triage@1"]], [provider])
    [unit] = run.units
    assert unit.passed and unit.variants == [] and unit.variants_skipped == NO_LIVE_VARIANTS
    assert run.variants_line().startswith("variants: none run (replay mode: cassettes hold")
    assert unit.certificate()["variants"]["skipped"] == NO_LIVE_VARIANTS
