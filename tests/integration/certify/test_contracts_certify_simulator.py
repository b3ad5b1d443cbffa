"""``onejob certify --sim`` in live mode against a real simulator socket, end to end.

One certification run (module scope) feeds every test here: the faithful providers
certify, each misbehaving profile fails at the layer it breaks (on the catalog's cases and
on the run's variants alike), the profile that learnt the catalog fails only its variants,
and the gateway's dispatcher, given the registry, fails over only to the faithful fallback.
"""

from __future__ import annotations

import asyncio
import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from certify.simulated import sim_providers
from cli.certify import certify, cmd_can_i_failover
from contracts.loader import load_catalog
from contracts.registry import CertificationRegistry
from gateway.dispatch.dispatcher import Dispatcher
from gateway.dispatch.routing import Routes
from gateway.settings import Settings

from .conftest import parse

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def certified(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("certify")
    args = parse(
        "certify", "--sim", "--repeats", "2",
        "--registry", str(root / "certs.json"), "--report-dir", str(root / "out"),
    )  # fmt: skip
    out = io.StringIO()
    code = asyncio.run(certify(args, out))
    report = json.loads((root / "out" / "contracts.json").read_text())
    units = {(u["provider"], u["contract"]): u for u in report["units"]}
    return {"code": code, "root": root, "units": units, "log": out.getvalue()}


def units_of(certified: dict[str, Any], provider: str) -> list[dict[str, Any]]:
    return [u for (p, _), u in certified["units"].items() if p == provider]


def case_failures(unit: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the failures of the catalog's own cases."""
    return [f for f in unit["failures"] if f["layer"] != "variants"]


def variant_failures(unit: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the failures of the run's variants."""
    return [f for f in unit["failures"] if f["layer"] == "variants"]


def test_some_failing_certifications_exit_with_code_one(certified: dict[str, Any]) -> None:
    assert certified["code"] == 1
    assert "[42/42]" in certified["log"]
    # faithful, faithful-claude and no-usage (its tokens estimated) on 3 contracts;
    # wrong-language(-claude) on the invoice contract only, which has no free text whose
    # language is checked.
    assert "11/42 certification(s) passed" in certified["log"], certified["log"][-3000:]
    assert "variants: 24 drawn over 3 contract(s) with seed cert-" in certified["log"]


@pytest.mark.parametrize("provider", ["faithful", "faithful-claude", "no-usage"])
def test_faithful_providers_certify_on_every_contract(
    certified: dict[str, Any], provider: str
) -> None:
    units = units_of(certified, provider)
    assert len(units) == 3
    for unit in units:
        assert unit["verdict"] == "pass", unit["failures"][:1]
        assert set(unit["pass_rates"].values()) == {1.0}


def test_drifting_fails_at_the_schema_layer_with_the_extra_key(certified: dict[str, Any]) -> None:
    for unit in units_of(certified, "drifting"):
        assert unit["verdict"] == "fail"
        assert unit["pass_rates"]["transport"] == 1.0 and unit["pass_rates"]["schema"] == 0.0
        for failure in case_failures(unit):
            assert failure["layer"] == "schema"
            assert "unexpected top-level key 'result'" in failure["reason"]
            assert failure["excerpt"].startswith('{"result": {')
        assert len(variant_failures(unit)) == 8
        assert {f["variant_layer"] for f in variant_failures(unit)} == {"schema"}


def test_sloppy_passes_the_schema_and_fails_semantics_naming_the_assertion(
    certified: dict[str, Any],
) -> None:
    broken = {
        "ticket-triage@1": "category-matches: wrong category",
        "invoice-extraction@1": "line-items-add-up-to-subtotal: sum of $.line_items[*].amount",
        "reply-draft@1": "body-cites-order-id: the reply does not cite the order id",
    }
    for unit in units_of(certified, "sloppy"):
        assert unit["pass_rates"]["schema"] == 1.0 and unit["pass_rates"]["model"] == 1.0
        assert unit["pass_rates"]["semantics"] == 0.0
        for failure in case_failures(unit):
            assert failure["layer"] == "semantics"
            assert broken[unit["contract"]] in failure["reason"]
        for failure in variant_failures(unit):
            assert failure["variant_layer"] == "semantics"
            assert broken[unit["contract"]] in failure["reason"]


def test_no_system_fails_because_its_answer_is_prose_around_json(
    certified: dict[str, Any],
) -> None:
    for unit in units_of(certified, "no-system"):
        for failure in case_failures(unit):
            assert failure["layer"] == "schema"
            assert "not_json" in failure["reason"]
            assert "Sure! Here is the" in failure["excerpt"]


@pytest.mark.parametrize("provider", ["wrong-language", "wrong-language-claude"])
def test_wrong_language_fails_semantics_naming_the_language_it_wrote(
    certified: dict[str, Any], provider: str
) -> None:
    units = {u["contract"]: u for u in units_of(certified, provider)}
    triage, reply = units["ticket-triage@1"], units["reply-draft@1"]
    assert triage["verdict"] == reply["verdict"] == "fail"
    assert units["invoice-extraction@1"]["verdict"] == "pass"
    assert {f["case"] for f in case_failures(triage)} == {
        "german-vat-invoice", "spanish-order-not-arrived", "japanese-app-crash",
        "arabic-refund-waiting",
    }  # fmt: skip
    for failure in case_failures(triage):
        assert failure["layer"] == "semantics"
        assert failure["reason"].startswith("summary-in-english: the summary must be written")
        assert "expected English (en" in failure["reason"]
    # Its variants fail exactly where they are not in English: the language is the relation's.
    variants = {v["case"]: v for v in triage["variant_cases"]}
    assert {f["variant"] for f in variant_failures(triage)} == {
        vid for vid, v in variants.items() if v["agree"]["language"] != "en"
    }
    german = next(f for f in case_failures(reply) if f["case"] == "damaged-item-refund-german")
    assert german["layer"] == "semantics"
    assert "body-in-asked-language" in german["reason"]
    assert "$.body is written in English (en" in german["reason"]
    assert "expected German (de" in german["reason"]


@pytest.mark.parametrize(
    ("provider", "configured"), [("other-model", "sim-gpt"), ("other-model-claude", "sim-claude")]
)
def test_other_model_fails_at_transport_naming_both_models(
    certified: dict[str, Any], provider: str, configured: str
) -> None:
    doc = json.loads((certified["root"] / "certs.json").read_text())
    for cert in doc["certificates"]:
        if cert["provider"] == provider:
            assert cert["reported_models"] == [f"{configured}-mini"]
    for unit in units_of(certified, provider):
        assert unit["pass_rates"]["transport"] == 0.0
        for failure in case_failures(unit):
            assert failure["layer"] == "transport"
            assert failure["reason"].startswith(
                f"model mismatch: configured {configured!r}, the provider reported "
                f"'{configured}-mini', which is neither a snapshot nor a declared alias"
            )


@pytest.mark.parametrize("provider", ["replaying", "replaying-claude"])
def test_replaying_fails_stability_as_one_sample_not_k(
    certified: dict[str, Any], provider: str
) -> None:
    for unit in units_of(certified, provider):
        assert unit["pass_rates"]["semantics"] == 1.0 and unit["pass_rates"]["stability"] == 0.0
        for failure in case_failures(unit):
            assert failure["layer"] == "stability"
            assert "replayed: repeat 2/2 came back with the provider id" in failure["reason"]
            assert "the 2 repeats are 1 sample(s), not 2" in failure["reason"]


def test_every_certificate_names_the_run_that_made_it(certified: dict[str, Any]) -> None:
    doc = json.loads((certified["root"] / "certs.json").read_text())
    run_ids = {c["run_id"] for c in doc["certificates"]}
    assert len(run_ids) == 1 and next(iter(run_ids)).startswith("cert-")
    assert f"run {next(iter(run_ids))}" in certified["log"]


@pytest.mark.parametrize("provider", ["catalog-only", "catalog-only-claude"])
def test_a_provider_that_learnt_the_catalog_fails_only_its_variants(
    certified: dict[str, Any], provider: str
) -> None:
    for unit in units_of(certified, provider):
        assert unit["verdict"] == "fail"
        assert case_failures(unit) == []
        assert all(c["passed"] for c in unit["cases"])
        assert unit["pass_rates"]["variants"] == 0.0
        assert len(variant_failures(unit)) == 8
        for failure in variant_failures(unit):
            assert failure["reason"].startswith(f"variant {failure['variant']} (")
            assert failure["variant_layer"] == "semantics"
            assert failure["variant"].startswith(failure["case"] + "~v")
        # The fallback disagrees with the primary on every variant, on a must-agree field.
        agreement = unit["agreement"]["faithful"]
        assert all(a["passed"] for a in agreement[: len(unit["cases"])])
        assert not any(a["passed"] for a in agreement[len(unit["cases"]) :])


def test_reports_show_the_matrix_and_every_failure(certified: dict[str, Any]) -> None:
    out: Path = certified["root"] / "out"
    html = (out / "contracts.html").read_text()
    assert "Provider &times; contract" in html and "Variants drawn" in html
    matrix = html[html.index('<h2 id="matrix">') : html.index('<h2 id="failover-pairs">')]
    assert matrix.count('class="pass"') == 11 and matrix.count('class="fail"') == 31
    assert "unexpected top-level key &#39;result&#39;" in html
    report = json.loads((out / "contracts.json").read_text())
    assert report["calls"]["variants"] == 14 * 24 * 2
    suite = ET.parse(out / "contracts.junit.xml").getroot().find("testsuite")
    assert suite is not None
    cases = sum(len(c.cases) for c in load_catalog().values())
    assert suite.get("tests") == str(14 * (cases + 24 + 3))  # cases, variants, budgets
    failing = sum(not c["passed"] for u in report["units"] for c in u["cases"] + u["variant_cases"])
    assert suite.get("failures") == str(failing)
    non_english = 4 + 3  # ticket-triage and reply-draft cases not written in English
    assert sum(not c["passed"] for u in report["units"] for c in u["cases"]) == (
        7 * cases + 2 * non_english
    )


def test_gateway_fails_over_only_to_the_certified_faithful_fallback(
    certified: dict[str, Any],
) -> None:
    providers = sim_providers()
    settings = Settings(
        providers=providers,
        routes={
            "*": {
                "primary": "faithful",
                "fallbacks": [
                    "drifting",
                    "sloppy",
                    "no-system",
                    "wrong-language-claude",
                    "other-model-claude",
                    "replaying-claude",
                    "catalog-only-claude",
                    "faithful-claude",
                ],
            }
        },
    )
    dispatcher = Dispatcher(
        store=None,  # type: ignore[arg-type]  # route decisions touch no store
        hub=None,  # type: ignore[arg-type]
        providers={},
        provider_configs=providers,
        catalog=load_catalog(),
        routes=Routes(
            settings,
            load_catalog(),
            providers,
            CertificationRegistry(certified["root"] / "certs.json"),
        ),
        settings=settings,
        metrics=None,  # type: ignore[arg-type]
        worker_id="w",
    )
    for contract in load_catalog():
        expected = ["faithful-claude"]
        if contract == "invoice-extraction@1":  # no free text: wrong-language is faithful here
            expected = ["wrong-language-claude", "faithful-claude"]
        assert dispatcher.effective_fallbacks(contract, "faithful") == expected


@pytest.mark.parametrize(
    ("fallback", "code", "words"),
    [
        ("faithful-claude", 0, "yes: certified"),
        ("drifting", 1, "no: failed: drifting on invoice-extraction@1 failed certification"),
        ("sloppy", 1, "(semantics layer, case us-saas-net-30: line-items-add-up"),
        ("no-system", 1, "(schema layer, case us-saas-net-30: output is not the contract's JSON"),
        ("other-model-claude", 1, "(transport layer, case us-saas-net-30: model mismatch"),
        ("replaying-claude", 1, "(stability layer, case us-saas-net-30: replayed: repeat 2/2"),
        ("catalog-only-claude", 1, "failed certification (variants layer, case "),
    ],
)
def test_can_i_failover_says_why(
    certified: dict[str, Any], fallback: str, code: int, words: str
) -> None:
    out = io.StringIO()
    args = parse(
        "can-i-failover", "--sim", "--registry", str(certified["root"] / "certs.json"),
        "--contract", "invoice-extraction@1", "--from", "faithful", "--to", fallback,
    )  # fmt: skip
    assert cmd_can_i_failover(args, out) == code
    assert words in out.getvalue()
