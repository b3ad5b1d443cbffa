"""The shipped catalog, the loader's errors and the contract fingerprint."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2
import pytest

from contracts.loader import contract_fingerprint, load_catalog, load_contract
from contracts.model import ContractError, parse_input_block

CATALOG = load_catalog()


def test_catalog_ships_three_contracts_with_at_least_twelve_cases_each() -> None:
    assert set(CATALOG) == {"ticket-triage@1", "invoice-extraction@1", "reply-draft@1"}
    for contract in CATALOG.values():
        assert len(contract.cases) >= 12, contract.name


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_every_contract_has_the_hard_cases(name: str) -> None:
    tags = {t for case in CATALOG[name].cases for t in case.tags}
    assert {"long", "unicode", "injection", "special-tokens"} <= tags


def test_only_side_effect_free_contracts_are_hedgeable() -> None:
    assert CATALOG["ticket-triage@1"].hedgeable
    assert CATALOG["invoice-extraction@1"].hedgeable
    assert not CATALOG["reply-draft@1"].hedgeable


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_faithful_answer_passes_every_case_and_sloppy_breaks_only_semantics(name: str) -> None:
    contract = CATALOG[name]
    for case in contract.cases:
        good = contract.simulate(case.input)
        assert contract.validate_output(good) == [], case.id
        assert contract.semantic_errors(case.input, good, case.expect) == [], case.id
        bad = contract.simulate_sloppy(case.input)
        assert contract.validate_output(bad) == [], case.id
        assert contract.semantic_errors(case.input, bad, case.expect), case.id


def test_render_appends_the_input_block_the_simulator_reads() -> None:
    contract = CATALOG["ticket-triage@1"]
    case = contract.case("special-tokens-in-pasted-log")
    prompt = contract.render(case.input)
    assert prompt.user.endswith("\n</input>")
    assert '\n\n<input contract="ticket-triage@1">\n' in prompt.user
    assert "<|endoftext|>" not in prompt.user  # escaped as \u003c inside the JSON
    assert parse_input_block(prompt.user) == ("ticket-triage@1", case.input)


def test_render_is_strict_about_undefined_variables() -> None:
    contract = CATALOG["ticket-triage@1"]
    broken = dict(contract.cases[0].input)
    del broken["customer"]
    with pytest.raises(jinja2.UndefinedError):
        contract.render(broken)


def test_provider_request_carries_schema_and_generation_settings() -> None:
    contract = CATALOG["invoice-extraction@1"]
    req = contract.provider_request(
        contract.cases[0].input, model="m", timeout=5.0, idempotency_key="job_1/1"
    )
    assert req.schema_name == "invoice_extraction_v1"
    assert req.output_schema is contract.output_schema
    assert (req.temperature, req.max_output_tokens) == (0.0, 4096)
    assert req.idempotency_key == "job_1/1"
    assert (
        contract.provider_request(
            contract.cases[0].input,
            model="m",
            timeout=5.0,
            idempotency_key=None,
            max_output_tokens=7,
        ).max_output_tokens
        == 7
    )


def test_extra_top_level_key_is_named_in_the_schema_error() -> None:
    contract = CATALOG["ticket-triage@1"]
    good = contract.simulate(contract.cases[0].input)
    errors = contract.validate_output({"result": good})
    assert "unexpected top-level key 'result'" in errors
    assert contract.validate_output({**good, "confidence": 0.9})[0] == (
        "unexpected top-level key 'confidence'"
    )


def test_model_layer_catches_what_the_schema_cannot() -> None:
    contract = CATALOG["invoice-extraction@1"]
    out = contract.simulate(contract.cases[0].input)
    out["due_date"] = "2020-01-01"
    assert contract.schema_errors(out) == []
    assert any("before issue_date" in e for e in contract.model_errors(out))
    out["due_date"] = "2026-02-30"  # matches the pattern, is no date
    assert contract.model_errors(out)


def test_input_validation_reports_readable_errors() -> None:
    contract = CATALOG["reply-draft@1"]
    bad = {**contract.cases[0].input, "max_chars": 5}
    assert any(e.startswith("max_chars:") for e in contract.validate_input(bad))


def test_changing_one_character_of_the_prompt_changes_the_fingerprint(triage_dir: Path) -> None:
    before = contract_fingerprint(triage_dir)
    system = triage_dir / "system.j2"
    system.write_text(system.read_text().replace("triage", "Triage", 1))
    assert contract_fingerprint(triage_dir) != before


def test_fingerprint_ignores_line_endings_json_layout_and_caches(triage_dir: Path) -> None:
    before = contract_fingerprint(triage_dir)
    schema = triage_dir / "output.schema.json"
    schema.write_text(json.dumps(json.loads(schema.read_text()), indent=7, sort_keys=True))
    user = triage_dir / "user.j2"
    user.write_bytes(user.read_bytes().replace(b"\n", b"\r\n"))
    (triage_dir / "__pycache__").mkdir(exist_ok=True)
    (triage_dir / "__pycache__" / "x.pyc").write_bytes(b"junk")
    assert contract_fingerprint(triage_dir) == before


def test_every_file_is_part_of_the_fingerprint(triage_dir: Path) -> None:
    before = contract_fingerprint(triage_dir)
    for path in sorted(p for p in triage_dir.iterdir() if p.is_file()):
        original = path.read_bytes()
        path.write_bytes(original + b"\n#" if path.suffix in (".py", ".j2") else original)
        if path.suffix in (".py", ".j2"):
            assert contract_fingerprint(triage_dir) != before, path.name
        path.write_bytes(original)
    assert contract_fingerprint(triage_dir) == before


@pytest.mark.parametrize(
    ("file", "edit", "reason"),
    [
        ("simulate.py", None, "required file is missing"),
        ("output.schema.json", '{"type": "object", "properties": {}}', "additionalProperties"),
        ("input.schema.json", '{"type": 12}', "not a valid JSON Schema"),
        ("input.schema.json", "{nope", "not valid JSON"),
        ("contract.toml", 'name = "x"\n', "missing key"),
        ("assertions.toml", '[[assertion]]\nid = "a"\nkind = "nearly"\npath = "$.x"\n', "kind"),
        ("assertions.toml", '[[assertion]]\nid = "a"\nkind = "equals"\npath = "$["\n', "JSONPath"),
        ("user.j2", "{{ ticket_id ", "line 1"),
        ("user.j2", "{{ no_such_field }}", "'no_such_field' is undefined"),
    ],
)
def test_loader_names_the_file_and_the_reason(
    triage_dir: Path, file: str, edit: str | None, reason: str
) -> None:
    target = triage_dir / file
    if edit is None:
        target.unlink()
    else:
        target.write_text(edit)
    with pytest.raises(ContractError) as info:
        load_contract(triage_dir)
    assert reason in str(info.value)
    assert file in info.value.file or "cases.jsonl" in info.value.file


def test_loader_rejects_bad_cases_with_their_line(triage_dir: Path) -> None:
    cases = triage_dir / "cases.jsonl"
    lines = cases.read_text().splitlines()
    first = json.loads(lines[0])
    dup = json.dumps(first)
    cases.write_text("\n".join([*lines, dup]) + "\n")
    with pytest.raises(ContractError, match=r"cases.jsonl:18: duplicate case id"):
        load_contract(triage_dir)
    first["input"]["channel"] = "pigeon"
    cases.write_text(json.dumps(first) + "\n")
    with pytest.raises(
        ContractError, match=r"cases.jsonl:1: case .* input breaks the input schema"
    ):
        load_contract(triage_dir)


def test_loader_rejects_must_agree_fields_the_output_lacks(triage_dir: Path) -> None:
    meta = triage_dir / "contract.toml"
    meta.write_text(meta.read_text().replace('"language"]', '"mood"]'))
    with pytest.raises(ContractError, match="unknown output field 'mood'"):
        load_contract(triage_dir)


def test_loading_twice_gives_equal_fingerprints_and_isolated_hooks(triage_dir: Path) -> None:
    a = load_contract(triage_dir)
    b = load_contract(triage_dir)
    assert a.fingerprint == b.fingerprint == CATALOG["ticket-triage@1"].fingerprint
