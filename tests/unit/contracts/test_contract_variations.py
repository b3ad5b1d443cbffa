"""The catalog's metamorphic relations: what they draw, and that a faithful answer passes them."""

from __future__ import annotations

import copy
import random
import shutil
from pathlib import Path

import pytest

from contracts import language
from contracts.loader import CATALOG_ROOT, load_catalog, load_contract
from contracts.model import ContractError
from contracts.variants import Variant, draw_variants

CATALOG = load_catalog()
SEEDS = 200  # seeds whose whole sample the faithful answers must pass, per contract


@pytest.mark.parametrize("name", list(CATALOG))
def test_every_shipped_contract_declares_relations_a_sample_and_a_budget(name: str) -> None:
    contract = CATALOG[name]
    assert len(contract.relations) >= 5
    assert contract.variants_per_run == 8
    assert contract.budget.latency_p95_ms and contract.budget.output_tokens_per_case
    for relation in contract.relations:
        applies = [
            case.id
            for case in contract.cases
            if relation.applies_to(case.tags)
            and relation.vary(
                copy.deepcopy(case.input), copy.deepcopy(case.expect), random.Random(7)
            )
            is not None
        ]
        assert applies, f"{relation.name} varies no case of {name}"


@pytest.mark.parametrize("name", list(CATALOG))
def test_the_same_seed_draws_the_same_variants_and_another_seed_others(name: str) -> None:
    contract = CATALOG[name]
    first = draw_variants(contract, "cert-20260301T100000Z-aaaa", 8)
    again = draw_variants(contract, "cert-20260301T100000Z-aaaa", 8)
    other = draw_variants(contract, "cert-20260301T100000Z-bbbb", 8)
    assert [(v.id, v.input, v.expect) for v in first] == [(v.id, v.input, v.expect) for v in again]
    assert [v.input for v in first] != [v.input for v in other]
    assert len(first) == 8 and len({v.id for v in first}) == 8
    for v in first:
        assert isinstance(v, Variant) and v.seed == "cert-20260301T100000Z-aaaa"
        assert v.id.startswith(f"{v.origin}~v") and v.relations
        assert not contract.is_catalog_input(v.input)
        assert contract.validate_input(v.input) == []


@pytest.mark.parametrize("name", list(CATALOG))
def test_a_faithful_answer_passes_every_variant_of_two_hundred_seeds(name: str) -> None:
    language.detector()
    contract = CATALOG[name]
    broken = []
    for seed in range(SEEDS):
        for v in draw_variants(contract, f"seed-{seed}", contract.variants_per_run):
            out = contract.simulate(v.input)
            errors = contract.validate_output(out) or contract.semantic_errors(
                v.input, out, v.expect
            )
            if errors:
                broken.append(f"seed-{seed} {v.id} ({v.variation}): {errors[0]}")
    assert broken == []


@pytest.mark.parametrize("name", list(CATALOG))
def test_the_memorising_answer_is_right_on_the_catalog_and_wrong_on_a_variant(name: str) -> None:
    contract = CATALOG[name]
    for case in contract.cases:
        assert contract.simulate_memorised(case.input) == contract.simulate(case.input)
    for v in draw_variants(contract, "seed-0", 8):
        right, wrong = contract.simulate(v.input), contract.simulate_memorised(v.input)
        assert [f for f in contract.must_agree if right[f] != wrong[f]], v.id


def _vary(contract_name: str, relation_name: str, case_id: str, seed: int = 3) -> tuple:
    contract = CATALOG[contract_name]
    relation = next(r for r in contract.relations if r.name == relation_name)
    case = contract.case(case_id)
    out = relation.vary(copy.deepcopy(case.input), copy.deepcopy(case.expect), random.Random(seed))
    assert out is not None
    return case, out[0], out[1]


def test_scaled_quantities_rewrite_lines_and_totals_in_the_invoices_own_number_format() -> None:
    case, varied, expect = _vary("invoice-extraction@1", "scale-quantities", "german-rechnung-mwst")
    factor = expect["subtotal"] / case.expect["subtotal"]
    assert factor in (2, 3, 4, 5, 10)
    assert expect["tax"] == round(0.19 * expect["subtotal"], 2)
    assert expect["total"] == round(expect["subtotal"] + expect["tax"], 2)
    total_line = next(ln for ln in varied["text"].splitlines() if ln.startswith("Gesamtbetrag"))
    printed = f"{expect['total']:,.2f}".replace(",", "X").replace(".", ",").replace("X", ".")
    assert total_line.rstrip().endswith(f"{printed} €")
    assert expect["line_items"] == case.expect["line_items"]


def test_shifted_dates_keep_the_invoices_date_format_and_payment_terms() -> None:
    case, varied, expect = _vary("invoice-extraction@1", "shift-dates", "us-date-mm-dd")
    issue = expect["issue_date"]
    assert issue != case.expect["issue_date"]
    y, m, d = issue.split("-")
    assert f"Invoice Date: {m}/{d}/{y}" in varied["text"]
    _, varied, expect = _vary("invoice-extraction@1", "shift-dates", "us-saas-net-30")
    assert "Net 30" in varied["text"]
    assert expect["due_date"] > expect["issue_date"]


def test_an_extra_line_adds_one_item_and_its_amount_to_the_totals() -> None:
    case, varied, expect = _vary("invoice-extraction@1", "extra-line", "uk-vat-invoice-pounds")
    assert expect["line_items"] == case.expect["line_items"] + 1
    assert varied["text"].count(" @ £") == case.input["text"].count(" @ £") + 1
    assert expect["total"] > case.expect["total"]


def test_asking_the_reply_in_another_language_changes_only_the_language() -> None:
    case, varied, expect = _vary("reply-draft@1", "reply-language", "late-delivery-new-date")
    assert varied["language"] != case.input["language"] and expect == case.expect


def test_a_new_triage_customer_replaces_the_name_in_the_signature() -> None:
    case, varied, expect = _vary("ticket-triage@1", "other-customer", "german-vat-invoice")
    assert "Jürgen" not in varied["body"] and varied["customer"]["name"] in varied["body"]
    assert varied["ticket_id"] != case.input["ticket_id"] and expect == case.expect


def _copy(tmp_path: Path, name: str = "ticket-triage") -> Path:
    dst = tmp_path / name
    shutil.copytree(CATALOG_ROOT / name, dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def test_a_sample_without_relations_is_a_contract_error(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    (folder / "variations.py").unlink()
    with pytest.raises(ContractError, match=r"per_run > 0 needs variations.py"):
        load_contract(folder)


def test_an_unknown_budget_key_is_a_contract_error(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    toml = folder / "contract.toml"
    toml.write_text(toml.read_text().replace("latency_p95_ms", "latency_p99_ms"))
    with pytest.raises(ContractError, match=r"unknown budget key\(s\) \['latency_p99_ms'\]"):
        load_contract(folder)


def test_relations_that_are_not_relations_are_a_contract_error(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    (folder / "variations.py").write_text("RELATIONS = ('other-customer',)\n")
    with pytest.raises(ContractError, match="RELATIONS must be a tuple"):
        load_contract(folder)


def test_without_variations_or_budget_a_contract_draws_nothing(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    (folder / "variations.py").unlink()
    toml = folder / "contract.toml"
    text = toml.read_text()
    toml.write_text(text[: text.index("\n# Variants of the cases")] + "\n")
    contract = load_contract(folder)
    assert contract.relations == () and contract.variants_per_run == 0
    assert not contract.budget.declared and draw_variants(contract, "s", 8) == ()
