"""``onejob certify --sim`` in live mode against a real simulator socket, end to end.

One certification run (module scope) feeds every test here: the faithful providers
certify, each misbehaving profile fails at the layer it breaks, and the gateway's
dispatcher, given the registry, fails over only to the faithful fallback.
"""

from __future__ import annotations

import asyncio
import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from contracts.catalog import load_catalog
from contracts.cli import certify, cmd_can_i_failover, sim_providers
from contracts.registry import CertificationRegistry
from gateway.dispatcher import Dispatcher
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


def test_some_failing_certifications_exit_with_code_one(certified: dict[str, Any]) -> None:
    assert certified["code"] == 1
    assert "[15/15]" in certified["log"]
    assert "6/15 certification(s) passed" in certified["log"]


@pytest.mark.parametrize("provider", ["faithful", "faithful-claude"])
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
        for failure in unit["failures"]:
            assert failure["layer"] == "schema"
            assert "unexpected top-level key 'result'" in failure["reason"]
            assert failure["excerpt"].startswith('{"result": {')


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
        for failure in unit["failures"]:
            assert failure["layer"] == "semantics"
            assert broken[unit["contract"]] in failure["reason"]


def test_no_system_fails_because_its_answer_is_prose_around_json(
    certified: dict[str, Any],
) -> None:
    for unit in units_of(certified, "no-system"):
        for failure in unit["failures"]:
            assert failure["layer"] == "schema"
            assert "not_json" in failure["reason"]
            assert "Sure! Here is the" in failure["excerpt"]


def test_reports_show_the_matrix_and_every_failure(certified: dict[str, Any]) -> None:
    out: Path = certified["root"] / "out"
    html = (out / "contracts.html").read_text()
    assert "Provider &times; contract" in html
    assert html.count('class="pass"') == 6 and html.count('class="fail"') == 9
    assert "unexpected top-level key &#39;result&#39;" in html
    suite = ET.parse(out / "contracts.junit.xml").getroot().find("testsuite")
    assert suite is not None
    cases = sum(len(c.cases) for c in load_catalog().values())
    assert suite.get("tests") == str(5 * cases)
    assert suite.get("failures") == str(3 * cases)


def test_gateway_fails_over_only_to_the_certified_faithful_fallback(
    certified: dict[str, Any],
) -> None:
    providers = sim_providers()
    settings = Settings(
        providers=providers,
        routes={
            "*": {
                "primary": "faithful",
                "fallbacks": ["drifting", "sloppy", "no-system", "faithful-claude"],
            }
        },
    )
    dispatcher = Dispatcher(
        store=None,  # type: ignore[arg-type]  # route decisions touch no store
        hub=None,  # type: ignore[arg-type]
        providers={},
        provider_configs=providers,
        catalog=load_catalog(),
        certifications=CertificationRegistry(certified["root"] / "certs.json"),
        settings=settings,
        metrics=None,  # type: ignore[arg-type]
        worker_id="w",
    )
    for contract in load_catalog():
        assert dispatcher.effective_fallbacks(contract, "faithful") == ["faithful-claude"]


@pytest.mark.parametrize(
    ("fallback", "code", "words"),
    [
        ("faithful-claude", 0, "yes: certified"),
        ("drifting", 1, "no: failed: drifting on invoice-extraction@1 failed certification"),
        ("sloppy", 1, "(semantics layer, case us-saas-net-30: line-items-add-up"),
        ("no-system", 1, "(schema layer, case us-saas-net-30: output is not the contract's JSON"),
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
