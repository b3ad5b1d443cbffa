"""Latency, token and cost budgets: recorded per provider, a fallback beyond them refused."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx
import pytest

from certify.results import CertificationRun, Mode
from certify.runner import Runner
from certify.simulated import sim_profiles, sim_providers
from certify.usage import Price
from cli.certify import certify
from contracts.loader import load_catalog, load_contract
from contracts.model import Contract
from contracts.registry import CertificationRegistry
from providers.simulator import create_sim_app
from reports.contracts_report import write_reports

from .conftest import parse

SIM_URL = "http://simulator.invalid"
DELAY = 0.3  # seconds the slow fallback takes per call


def with_budget(catalog_copy: Path, budget: str) -> Contract:
    """Return ticket-triage@1 from the copy, with ``budget`` as its [budget] table."""
    toml = catalog_copy / "ticket-triage" / "contract.toml"
    text = toml.read_text()
    toml.write_text(text[: text.index("[budget]")] + "[budget]\n" + budget + "\n")
    return load_contract(catalog_copy / "ticket-triage")


async def certify_pair(
    contract: Contract, prices: dict[str, Price] | None = None, slow: str | None = None
) -> CertificationRun:
    providers = sim_providers(SIM_URL)
    app = create_sim_app(profiles=sim_profiles(), catalog=load_catalog())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as client:
        if slow:
            behaviours = [{"kind": "delay", "seconds": DELAY}]
            script = {"provider": slow, "behaviours": behaviours, "count": 1000}
            assert (await client.post(f"{SIM_URL}/_sim/script", json=script)).status_code < 300
        runner = Runner(Mode.LIVE, repeats=1, client=client, variants=2, prices=prices)
        return await runner.run(
            [contract],
            [providers["faithful"], providers["faithful-claude"]],
            pairs=[("faithful", "faithful-claude")],
        )


async def test_a_fallback_over_the_latency_budget_is_refused(
    catalog_copy: Path, tmp_path: Path
) -> None:
    contract = with_budget(catalog_copy, f"latency_p95_ms = {DELAY * 1000 / 2:g}")
    run = await certify_pair(contract, slow="faithful-claude")
    fast, slow = run.units
    assert fast.passed and fast.usage_summary().latency_ms["p95"] < DELAY * 1000 / 2
    assert not slow.passed and all(c.passed for c in slow.checked)
    assert slow.usage_summary().latency_ms["p95"] >= DELAY * 1000
    [failure] = slow.failures()
    assert failure["layer"] == "budget" and failure["case"] == "(all)"
    assert failure["reason"].startswith("p95 latency ")
    assert failure["reason"].endswith(" ms is over the budget of 150 ms")
    registry = CertificationRegistry(tmp_path / "certs.json")
    registry.record([u.certificate() for u in run.units])
    providers = sim_providers(SIM_URL)
    verdict = registry.can_failover(contract, providers["faithful"], providers["faithful-claude"])
    assert not verdict.allowed and "(budget layer, case (all): p95 latency" in str(verdict)
    cert = next(e for e in registry.entries() if e["provider"] == "faithful-claude")
    assert cert["usage"]["latency_ms"]["p95"] >= DELAY * 1000 and cert["budget"]["passed"] is False
    paths = write_reports(run, tmp_path / "out")
    html = paths["html"].read_text()
    assert "Latency, tokens and cost" in html and "is over the budget of 150 ms" in html
    suite = ET.parse(paths["junit"]).getroot().find("testsuite")
    assert suite is not None
    budget_cases = [c for c in suite.iter("testcase") if c.get("name") == "(budget)"]
    assert [c.find("failure") is not None for c in budget_cases] == [False, True]


async def test_output_tokens_beyond_the_budget_fail_every_provider(catalog_copy: Path) -> None:
    contract = with_budget(catalog_copy, "output_tokens_per_case = 10")
    run = await certify_pair(contract)
    for unit in run.units:
        check = unit.budget_check()
        assert not check.passed and check.reason.endswith(
            " output tokens per case is over the budget of 10"
        )
        assert unit.pass_rates()["budget"] == 0.0


async def test_cost_is_judged_with_a_price_and_refused_without_one(catalog_copy: Path) -> None:
    contract = with_budget(catalog_copy, "cost_per_case_usd = 0.01")
    run = await certify_pair(contract, prices={"faithful": Price(0.5, 1.5)})
    priced, unpriced = run.units
    assert priced.passed and priced.usage_summary().cost_per_case_usd is not None
    assert not unpriced.passed
    assert unpriced.budget_check().reason == (
        "cost per case cannot be judged: no price is known for faithful-claude "
        "(give --price faithful-claude=INPUT,OUTPUT in US dollars per million tokens)"
    )
    contract = with_budget(catalog_copy, "cost_per_case_usd = 0.0000001")
    run = await certify_pair(contract, prices={"faithful": Price(0.5, 1.5)})
    assert run.units[0].budget_check().reason.endswith(" per case is over the budget of $0.0000001")


@pytest.mark.parametrize("price", ["faithful=1", "faithful", "=1,2", "faithful=a,b", "x=-1,2"])
async def test_a_malformed_price_is_an_error_before_anything_runs(
    tmp_path: Path, price: str
) -> None:
    out = io.StringIO()
    args = parse(
        "certify", "--sim", "--mode", "replay", "--price", price,
        "--registry", str(tmp_path / "c.json"), "--report-dir", str(tmp_path / "out"),
    )  # fmt: skip
    assert await certify(args, out) == 2
    assert out.getvalue().startswith("error: --price")
