"""A provider whose answers carry no ``usage`` is judged on tokens counted offline.

The ``no-usage`` simulator profile answers faithfully in an OpenAI-compatible envelope
without the ``usage`` object, as several local servers and proxies do. Its tokens are
counted with the provider's offline tokenizer (for ``sim-llama`` on the openai-compatible
wire: the 3-bytes estimate), marked estimated with the tokenizer and its margin, and the
budget judges those figures: within it, certified; over it, refused.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from certify.estimated import ESTIMATE_MARGIN
from certify.results import CertificationRun, Mode
from certify.runner import Runner
from certify.simulated import sim_prices, sim_profiles, sim_providers
from cli.certify_output import usage_line
from contracts.loader import load_catalog
from contracts.model import Contract
from contracts.registry import CertificationRegistry
from providers.simulator import create_sim_app
from reports.contracts_report import write_reports

from .test_certify_budgets import SIM_URL, with_budget

ESTIMATE = "estimate:3-bytes-per-token"


async def certify_no_usage(contract: Contract) -> CertificationRun:
    providers = sim_providers(SIM_URL)
    app = create_sim_app(profiles=sim_profiles(), catalog=load_catalog())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as client:
        # The envelope really has no usage object: the provider reports nothing.
        body = {"model": "sim-llama", "messages": [{"role": "user", "content": "x"}]}
        case = contract.cases[0]
        body["messages"][0]["content"] = contract.render(case.input).user
        answer = await client.post(f"{SIM_URL}/p/no-usage/v1/chat/completions", json=body)
        assert answer.status_code == 200 and "usage" not in answer.json()
        runner = Runner(Mode.LIVE, repeats=1, client=client, variants=2, prices=sim_prices())
        return await runner.run(
            [contract],
            [providers["faithful"], providers["no-usage"]],
            pairs=[("faithful", "no-usage")],
        )


async def test_a_faithful_provider_without_usage_is_certified_with_estimated_tokens(
    catalog_copy: Path, tmp_path: Path
) -> None:
    contract = with_budget(catalog_copy, "output_tokens_per_case = 300\ncost_per_case_usd = 0.01")
    run = await certify_no_usage(contract)
    reported, counted = run.units
    assert reported.passed and reported.usage_summary().estimated is None
    assert counted.passed, counted.failures()[:1]
    usage = counted.usage_summary()
    assert usage.estimated is not None
    assert usage.estimated["tokenizer"] == ESTIMATE
    assert usage.estimated["calls"] == usage.estimated["of"] == len(counted.checked)
    assert usage.estimated["margin"].startswith(
        f"{-ESTIMATE_MARGIN[0]:.0%} fewer to {ESTIMATE_MARGIN[1]:.0%} more tokens"
    )
    assert usage.output_tokens_per_case is not None and usage.cost_per_case_usd is not None
    assert "~" in usage.brief() and f"tokens estimated with {ESTIMATE}" in usage.brief()
    cert = counted.certificate()
    assert cert["verdict"] == "pass"
    assert cert["usage"]["tokens_estimated"]["tokenizer"] == ESTIMATE
    assert cert["budget"]["passed"] is True
    assert "the provider reported no usage" in cert["budget"]["tokens_estimated"]
    registry = CertificationRegistry(tmp_path / "certs.json")
    registry.record([u.certificate() for u in run.units])
    providers = sim_providers(SIM_URL)
    assert registry.can_failover(contract, providers["faithful"], providers["no-usage"]).allowed
    line = usage_line(contract, registry, "faithful", "no-usage")
    assert line is not None and "output tokens/case, ~$" in line
    assert f"tokens estimated with {ESTIMATE}" in line
    html = write_reports(run, tmp_path / "out")["html"].read_text()
    assert "(estimated)" in html and ESTIMATE in html


async def test_a_provider_without_usage_over_the_budget_is_still_refused(
    catalog_copy: Path,
) -> None:
    contract = with_budget(catalog_copy, "output_tokens_per_case = 10")
    run = await certify_no_usage(contract)
    counted = run.units[1]
    check = counted.budget_check()
    assert not check.passed and all(c.passed for c in counted.checked)
    assert " output tokens per case (estimated) is over the budget of 10" in check.reason
    assert f"estimated with {ESTIMATE} (the provider reported no usage; margin: " in check.reason
    [failure] = counted.failures()
    assert failure["layer"] == "budget"
    assert counted.certificate()["verdict"] == "fail"
