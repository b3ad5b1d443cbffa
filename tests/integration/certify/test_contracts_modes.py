"""Stale certificates, offline replay, loud cassette mismatches, scrubbed recording, pass^k."""

from __future__ import annotations

import asyncio
import io
import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from certify.checks import Layer
from certify.results import Mode
from certify.runner import Runner
from certify.simulated import sim_providers
from cli.certify import certify, cmd_can_i_failover
from contracts.loader import load_catalog
from contracts.loader import load_catalog as contract_catalog
from contracts.registry import CertificationRegistry, adapter_version_of
from providers.config import ProviderConfig
from providers.simulator import Behaviour, BehaviourKind, run_simulator
from reports.contracts_report import write_reports

from .conftest import parse


def can_i(registry: Path, catalog: Path, to: str = "faithful-claude") -> tuple[int, str]:
    out = io.StringIO()
    args = parse(
        "can-i-failover", "--sim", "--registry", str(registry), "--catalog", str(catalog),
        "--contract", "ticket-triage@1", "--from", "faithful", "--to", to,
    )  # fmt: skip
    return cmd_can_i_failover(args, out), out.getvalue()


async def test_one_changed_prompt_character_makes_certificates_stale(
    tmp_path: Path, catalog_copy: Path
) -> None:
    registry = tmp_path / "certs.json"
    args = parse(
        "certify", "--sim", "--repeats", "1", "--contract", "ticket-triage@1",
        "--provider", "faithful", "--provider", "faithful-claude", "--catalog", str(catalog_copy),
        "--registry", str(registry), "--report-dir", str(tmp_path / "out"),
    )  # fmt: skip
    assert await certify(args, io.StringIO()) == 0
    code, said = can_i(registry, catalog_copy)
    assert code == 0
    assert said.startswith(
        "yes: certified: faithful and faithful-claude both hold valid certificates "
        "for ticket-triage@1 and agree on its 17 cases"
    )
    # And what the pair costs, against the contract's budget (issue 38).
    usage = said.splitlines()[1]
    assert usage.startswith("usage: fallback faithful-claude p95 "), said
    assert "output tokens/case, $" in usage and "; primary faithful p95 " in usage
    assert usage.endswith("; budget p95 20,000 ms, 300 output tokens/case"), usage
    system = catalog_copy / "ticket-triage" / "system.j2"
    system.write_text(system.read_text().replace("help desk", "help-desk", 1))
    code, said = can_i(registry, catalog_copy)
    assert code == 1
    assert said.startswith("no: fingerprint changed: faithful-claude on ticket-triage@1")


async def test_a_fallback_certified_alone_is_refused_until_its_primary_has_evidence(
    tmp_path: Path,
) -> None:
    registry = tmp_path / "certs.json"

    async def certify_one(provider: str) -> str:
        out = io.StringIO()
        args = parse(
            "certify", "--sim", "--repeats", "1", "--contract", "ticket-triage@1",
            "--provider", provider, "--registry", str(registry),
            "--report-dir", str(tmp_path / provider),
        )  # fmt: skip
        assert await certify(args, out) == 0, out.getvalue()
        return out.getvalue()

    await certify_one("faithful-claude")
    catalog = Path(load_catalog().root)
    code, said = can_i(registry, catalog)
    assert code == 1
    assert said.startswith("no: missing certificate for faithful on ticket-triage@1")
    # The primary's certificate from before evidence existed: certified, but not comparable.
    doc = json.loads(registry.read_text())
    old = {**doc["certificates"][0], "provider": "faithful", "protocol": "openai"}
    old.update(
        model="sim-gpt", adapter_version=adapter_version_of("openai"), evidence=None, run_id=None
    )
    doc["certificates"].append(old)
    registry.write_text(json.dumps(doc))
    code, said = can_i(registry, catalog)
    assert code == 1
    assert said.startswith("no: no agreement evidence with faithful: faithful-claude cannot be")
    # A separate run certifies the primary: the two stored certificates are compared.
    await certify_one("faithful")
    code, said = can_i(registry, catalog)
    assert code == 0, said
    runs = {c["run_id"] for c in json.loads(registry.read_text())["certificates"]}
    assert len(runs) == 2
    assert said.startswith("yes: certified: faithful and faithful-claude both hold valid")
    assert "agree on its 17 cases (runs cert-" in said
    assert "pass^k alone" not in said  # both models took temperature 0


async def test_a_model_that_refuses_temperature_is_certified_on_pass_k_alone(
    tmp_path: Path,
) -> None:
    contract = load_catalog()["ticket-triage@1"]
    async with run_simulator(port=0, catalog=contract_catalog) as sim:
        takes = sim_providers(sim.base_url)["faithful-claude"]
        # The Messages API refuses temperature for this model (so do the adapter's own rules
        # and the simulator, 400): a passing run also shows the adapter left it out.
        refuses = takes.model_copy(
            update={
                "name": "claude-5",
                "model": "claude-sonnet-5",
                "base_url": sim.provider_url("claude-5", "anthropic"),
            }
        )
        run = await Runner(Mode.LIVE, repeats=2).run(
            [contract], [takes, refuses], pairs=[("faithful-claude", "claude-5")]
        )
    by_name = {u.provider.name: u for u in run.units}
    assert run.passed, [u.failures() for u in run.units]
    alone, both = by_name["claude-5"].certificate(), by_name["faithful-claude"].certificate()
    assert alone["omitted_parameters"] == ["temperature"]
    assert alone["stability_basis"] == "pass^k alone"
    assert both["omitted_parameters"] == []
    assert both["stability_basis"] == "temperature 0 and pass^k"
    assert by_name["faithful-claude"].stability_note() is None
    assert by_name["claude-5"].stability_note() == (
        "stability rests on pass^2 alone: claude-sonnet-5 refuses temperature, so the "
        "contract's temperature 0 was not sent"
    )

    paths = write_reports(run, tmp_path / "out")
    units = {u["provider"]: u for u in json.loads(paths["json"].read_text())["units"]}
    assert units["claude-5"]["stability_basis"] == "pass^k alone"
    assert units["faithful-claude"]["omitted_parameters"] == []
    assert paths["html"].read_text().count("rests on pass^2 alone") == 1

    registry = CertificationRegistry(tmp_path / "certs.json")
    registry.record([u.certificate() for u in run.units])
    verdict = registry.can_failover(contract, takes, refuses)
    assert verdict.allowed, verdict
    assert verdict.detail.endswith(
        "; the stability of claude-5 rests on pass^k alone (the model refuses temperature, "
        "so the contract's was not sent)"
    )


async def test_two_runs_send_different_downstream_keys(tmp_path: Path) -> None:
    contract = load_catalog()["ticket-triage@1"]
    async with run_simulator(port=0) as sim:
        provider = sim_providers(sim.base_url)["faithful"]
        for _ in range(2):
            runner = Runner(Mode.LIVE, repeats=2)
            async with runner.client_for([provider]) as client:
                await runner.run_case(client, contract, contract.cases[0], provider)
        keys = [c["idempotency_key"] for c in sim.calls("faithful")]
    assert len(keys) == len(set(keys)) == 4
    assert all(k.startswith("certify/cert-") for k in keys)
    assert keys[0].endswith(f"/ticket-triage@1/{contract.cases[0].id}/1")


async def test_replay_passes_offline_and_never_certifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_network(self: socket.socket, *args: Any) -> None:
        raise AssertionError(f"replay tried to open a connection to {args}")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket.socket, "connect_ex", no_network)
    registry = tmp_path / "certs.json"
    out = io.StringIO()
    args = parse(
        "certify", "--sim", "--mode", "replay",
        "--registry", str(registry), "--report-dir", str(tmp_path / "out"),
    )  # fmt: skip
    assert await certify(args, out) == 0, out.getvalue()
    assert "6/6 certification(s) passed" in out.getvalue()
    modes = {c["mode"] for c in json.loads(registry.read_text())["certificates"]}
    assert modes == {"replay"}
    contract = load_catalog()["ticket-triage@1"]
    sims = sim_providers()
    verdict = CertificationRegistry(registry).can_failover(
        contract, sims["faithful"], sims["faithful-claude"]
    )
    both = "faithful-claude and faithful"
    assert verdict.reason == f"missing certificate for {both} on ticket-triage@1"


async def test_a_changed_case_fails_replay_loudly_instead_of_answering_it(
    tmp_path: Path, catalog_copy: Path
) -> None:
    cases = catalog_copy / "ticket-triage" / "cases.jsonl"
    lines = cases.read_text().splitlines()
    first = json.loads(lines[0])
    first["input"]["subject"] = "Charged three times for my March subscription"
    cases.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    out = io.StringIO()
    args = parse(
        "certify", "--sim", "--mode", "replay", "--provider", "faithful",
        "--contract", "ticket-triage@1", "--catalog", str(catalog_copy),
        "--registry", str(tmp_path / "certs.json"), "--report-dir", str(tmp_path / "out"),
    )  # fmt: skip
    assert await certify(args, out) == 2
    said = out.getvalue()
    assert "error: faithful/ticket-triage@1/double-charge-march: cassette faithful/" in said
    assert "request body does not match the recording at /messages/1/content" in said


async def test_a_cassette_filed_under_another_case_is_refused(cassettes_copy: Path) -> None:
    folder = cassettes_copy / "faithful" / "ticket-triage@1"
    (folder / "office-in-lisbon.json").write_text((folder / "double-charge-march.json").read_text())
    contract = load_catalog()["ticket-triage@1"]
    runner = Runner(Mode.REPLAY, repeats=1, cassette_root=cassettes_copy)
    provider = sim_providers()["faithful"]
    async with runner.client_for([provider]) as client:
        result = await runner.run_case(
            client, contract, contract.case("office-in-lisbon"), provider
        )
    assert not result.passed
    assert result.error is not None and "does not match the recording" in result.error
    assert result.checks[Layer.TRANSPORT].reason.startswith("cassette mismatch")
    assert result.outputs == [None]


async def test_recorded_cassettes_hold_no_api_key_on_any_protocol(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-live-0123456789abcdefSECRET"
    monkeypatch.setenv("ONEJOB_TEST_PROVIDER_KEY", secret)
    contract = load_catalog()["invoice-extraction@1"]
    async with run_simulator(port=0, catalog=contract_catalog) as sim:
        providers = [
            ProviderConfig(
                name=f"faithful-{protocol}",
                protocol=protocol,  # type: ignore[arg-type]
                base_url=sim.provider_url(f"faithful-{protocol}", protocol),
                model="sim-model",
                api_key_env="ONEJOB_TEST_PROVIDER_KEY",
                context_window=16_384,
            )
            for protocol in ("openai", "anthropic", "gemini", "openai-compatible")
        ]
        runner = Runner(Mode.RECORD, repeats=1, cassette_root=tmp_path, recorded_from="test")
        run = await runner.run(
            [contract], providers, case_filter=lambda c, case: case.id == "us-saas-net-30"
        )
    assert run.passed, [u.failures() for u in run.units]
    files = sorted(await asyncio.to_thread(lambda: list(tmp_path.rglob("*.json"))))
    assert len(files) == 4
    for path in files:
        text = path.read_text()
        assert secret not in text, path
        for header in ("authorization", "x-api-key", "x-goog-api-key"):
            assert f'"{header}"' not in text.lower(), (path, header)
    gemini = json.loads(
        (tmp_path / "faithful-gemini" / contract.name / "us-saas-net-30.json").read_text()
    )
    assert "key=" not in gemini["interactions"][0]["request"]["path"]


async def test_one_failed_repeat_breaks_stability_and_says_which() -> None:
    contract = load_catalog()["ticket-triage@1"]
    case = contract.case("double-charge-march")
    async with run_simulator(port=0, catalog=contract_catalog) as sim:
        sim.app.script.queue(
            "faithful", [Behaviour(BehaviourKind.OK), Behaviour(BehaviourKind.STATUS, code=503)]
        )
        provider = sim_providers(sim.base_url)["faithful"]
        runner = Runner(Mode.LIVE, repeats=3)
        async with runner.client_for([provider]) as client:
            result = await runner.run_case(client, contract, case, provider)
    checks = result.checks
    assert checks[Layer.RENDER].passed and checks[Layer.SCHEMA].passed
    assert not checks[Layer.TRANSPORT].passed
    assert checks[Layer.TRANSPORT].reason.startswith("repeat 2/3: definite failure (status_503)")
    assert checks[Layer.STABILITY].reason == "pass^3 failed: 2 of 3 repeats passed"
    assert result.first_failure() is checks[Layer.TRANSPORT]


def test_certify_exits_two_on_unknown_provider_or_contract(tmp_path: Path) -> None:
    for extra in (["--provider", "nobody"], ["--contract", "nothing@9"]):
        out = io.StringIO()
        args = parse("certify", "--sim", "--registry", str(tmp_path / "c.json"), *extra)
        assert asyncio.run(certify(args, out)) == 2
        assert out.getvalue().startswith("error: ")
    assert not os.path.exists(tmp_path / "c.json")
