"""Schema validation compiled once per schema (``contracts.validation``).

jsonschema-rs may only answer "valid"; python-jsonschema decides everything else. The
property that keeps every answer unchanged is one-sided: whatever the fast path accepts,
python-jsonschema accepts too. It is checked on every catalog contract, for inputs and
outputs, on the cases and on values built from them.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contracts.validation as validation
from contracts.loader import load_catalog
from contracts.validation import CompiledSchema, ecma_end

CATALOG = load_catalog()
CONTRACTS = sorted(CATALOG.keys())

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(["", "\n", "SUP-42\n", "٤٢", "é", "\ud800", "2024-01-01\n", "EUR"])
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _mutate(value: Any, data: st.DataObject) -> Any:
    """Replace, drop or add one member somewhere in ``value`` (a copy)."""
    value = copy.deepcopy(value)
    node = value
    while isinstance(node, dict) and node and data.draw(st.booleans(), label="descend"):
        key = data.draw(st.sampled_from(sorted(node)), label="key")
        if not isinstance(node[key], dict) or not node[key]:
            break
        node = node[key]
    if not isinstance(node, dict) or not node:
        return data.draw(json_values, label="whole")
    key = data.draw(st.sampled_from(sorted(node)), label="member")
    how = data.draw(st.sampled_from(["replace", "drop", "add", "newline", "float"]), label="how")
    if how == "replace":
        node[key] = data.draw(json_values, label="new")
    elif how == "drop":
        del node[key]
    elif how == "add":
        node[data.draw(st.text(max_size=8), label="extra")] = data.draw(json_values)
    elif how == "newline" and isinstance(node[key], str):
        node[key] += "\n"
    elif how == "float" and isinstance(node[key], int) and not isinstance(node[key], bool):
        node[key] = float(node[key])
    return value


def _fast_implies_judge(check: CompiledSchema, value: Any) -> None:
    if check.accepts_fast(value):
        assert check.judge.is_valid(value), f"fast path accepted what the judge refuses: {value!r}"


@pytest.mark.parametrize("name", CONTRACTS)
def test_every_case_input_is_accepted_by_both(name: str) -> None:
    contract = CATALOG.get(name)
    check = CompiledSchema(contract.input_schema)
    for case in contract.cases:
        assert check.accepts_fast(case.input), case.id
        assert contract.validate_input(case.input) == []


@pytest.mark.parametrize("name", CONTRACTS)
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_what_the_fast_path_accepts_the_judge_accepts(name: str, data: st.DataObject) -> None:
    contract = CATALOG.get(name)
    case = data.draw(st.sampled_from(contract.cases), label="case")
    _fast_implies_judge(CompiledSchema(contract.input_schema), _mutate(case.input, data))
    _fast_implies_judge(CompiledSchema(contract.output_schema), _mutate(dict(case.expect), data))
    _fast_implies_judge(CompiledSchema(contract.output_schema), data.draw(json_values))


def test_the_judge_reads_dollar_as_ecma_262_does() -> None:
    """ECMA-262 ``$`` refuses a final newline, and so does the judge now (Python's ``$``
    took ``"EUR\\n"``); its message names the pattern as the schema wrote it."""
    schema = {"type": "string", "pattern": "^[A-Z]{3}$"}
    check = CompiledSchema(schema)
    assert not check.accepts_fast("EUR\n")
    assert [e.message for e in check.errors("EUR\n")] == ["'EUR\\n' does not match '^[A-Z]{3}$'"]
    assert [e.validator_value for e in check.errors("EURO")] == ["^[A-Z]{3}$"]
    assert list(check.errors("EUR")) == []


def test_every_catalog_pattern_refuses_a_final_newline() -> None:
    """What the catalog's own cases hold, with a newline after a patterned string, fails."""
    checked = 0
    for name in CONTRACTS:
        contract = CATALOG.get(name)
        for prop, spec in contract.input_schema.get("properties", {}).items():
            pattern = spec.get("pattern") if isinstance(spec, dict) else None
            if not pattern or not pattern.endswith("$"):
                continue
            case = next((c for c in contract.cases if isinstance(c.input.get(prop), str)), None)
            if case is None:
                continue
            bad = {**case.input, prop: case.input[prop] + "\n"}
            assert contract.validate_input(case.input) == [], (name, prop)
            assert contract.validate_input(bad), (name, prop)
            checked += 1
    assert checked >= 3


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("^[A-Z]{3}$", r"^[A-Z]{3}\Z"),
        (r"a\$b$", r"a\$b\Z"),  # an escaped $ is a dollar sign
        (r"\\$", r"\\\Z"),  # an escaped backslash, then the anchor
        ("[$]x$", r"[$]x\Z"),  # in a set, $ is a member
        ("[]$]$", r"[]$]\Z"),  # a set opening with ] (as Python reads it)
        ("[^]$]$", r"[^]$]\Z"),
        ("(a$|b$)", r"(a\Z|b\Z)"),
        ("no anchor", "no anchor"),
    ],
)
def test_ecma_end_turns_only_the_anchor(pattern: str, expected: str) -> None:
    assert ecma_end(pattern) == expected


def test_pattern_properties_and_data_keep_their_meaning() -> None:
    """``patternProperties`` keys are patterns too (and ``additionalProperties`` reads
    them); ``const``, ``enum`` and ``properties`` names are not."""
    schema = {
        "type": "object",
        "properties": {"pattern": {"const": {"pattern": "a$"}}},
        "patternProperties": {"^x-[a-z]+$": {"type": "integer"}},
        "additionalProperties": False,
    }
    check = CompiledSchema(schema)
    assert list(check.errors({"x-ok": 1, "pattern": {"pattern": "a$"}})) == []
    assert [e.validator for e in check.errors({"x-ok\n": 1})] == ["additionalProperties"]
    assert [e.validator for e in check.errors({"pattern": {"pattern": "a\\Z"}})] == ["const"]


def test_additional_properties_names_the_patterns_as_written() -> None:
    """Refusing an extra key, the judge lists the ``patternProperties`` keys; they are
    the contract's, not the ``\\Z`` copies the judge runs on."""
    schema = {
        "type": "object",
        "patternProperties": {"^x-[a-z]+$": {}, "^id$": {}},
        "additionalProperties": False,
    }
    check = CompiledSchema(schema)
    assert [e.message for e in check.errors({"b": 1})] == [
        "'b' does not match any of the regexes: '^id$', '^x-[a-z]+$'"
    ]
    nested = CompiledSchema({"type": "object", "properties": {"meta": schema}})
    assert [e.message for e in nested.errors({"meta": {"x-a\n": 1, "c": 2}})] == [
        "'c', 'x-a\\n' do not match any of the regexes: '^id$', '^x-[a-z]+$'"
    ]


def test_multiple_of_keeps_to_the_judge() -> None:
    """python-jsonschema refuses 0.07 as a multiple of 0.01 (float division); jsonschema-rs
    accepts it. A schema with ``multipleOf`` anywhere never takes the fast path."""
    check = CompiledSchema({"type": "object", "properties": {"x": {"multipleOf": 0.01}}})
    assert not check.accepts_fast({"x": 0.07})
    assert [e.validator for e in check.errors({"x": 0.07})] == ["multipleOf"]


def test_values_the_fast_path_cannot_read_go_to_the_judge() -> None:
    check = CompiledSchema({"type": "string", "maxLength": 3})
    assert not check.accepts_fast("\ud800")  # a lone surrogate: no UTF-8 for Rust
    assert list(check.errors("\ud800")) == []
    number = CompiledSchema({"type": "number"})
    assert not number.accepts_fast(math.nan)
    assert list(number.errors(math.nan)) == []  # python-jsonschema's answer, unchanged


def test_errors_come_in_path_order_with_the_judges_messages() -> None:
    contract = CATALOG.get("ticket-triage@1")
    case = contract.cases[0]
    bad = dict(case.input, ticket_id="nope", channel="fax")
    expected = sorted(
        jsonschema.Draft202012Validator(contract.input_schema).iter_errors(bad),
        key=lambda e: list(e.absolute_path),
    )
    assert contract.validate_input(bad) == [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in expected
    ]
    assert [m.split(":")[0] for m in contract.validate_input(bad)] == ["channel", "ticket_id"]


def test_each_schema_is_compiled_once(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[object] = []
    real = validation.CompiledSchema.__init__

    def counting(self: CompiledSchema, schema: Any) -> None:
        built.append(schema)
        real(self, schema)

    monkeypatch.setattr(validation.CompiledSchema, "__init__", counting)
    catalog = load_catalog()  # fresh contracts: loading checks their cases' inputs
    contract = catalog.get("ticket-triage@1")
    for _ in range(3):
        contract.validate_input(contract.cases[0].input)
        contract.validate_output(dict(contract.cases[0].expect))
    mine = [s for s in built if s is contract.input_schema or s is contract.output_schema]
    assert mine == [contract.input_schema, contract.output_schema]
    assert len({id(s) for s in built}) == len(built)  # no schema compiled twice


@pytest.mark.parametrize(
    ("pattern", "value"),
    [(r"\S", "\x1f"), (r"^\D+$", "٣"), (r"^\W+$", "é"), (r"^[^\d]+$", "٣")],
)
def test_classes_wider_in_ecma_keep_to_the_judge(pattern: str, value: str) -> None:
    """ECMA-262's ``\\S``, ``\\D``, ``\\W`` (and a negated set of a class) take what Python's
    refuse: jsonschema-rs would accept these values; the judge refuses them."""
    for schema in (
        {"type": "string", "pattern": pattern},
        {"type": "object", "patternProperties": {pattern: {"type": "integer"}}},
    ):
        check = CompiledSchema(schema)
        assert not check.accepts_fast(value if "pattern" in schema else {value: 1})
    check = CompiledSchema({"type": "string", "pattern": pattern})
    assert [e.validator for e in check.errors(value)] == ["pattern"]


def test_a_schema_jsonschema_rs_cannot_build_is_judged_alone() -> None:
    """A remote ``$ref`` is never fetched (offline); the judge answers as it did."""
    check = CompiledSchema({"$ref": "https://example.com/elsewhere.json"})
    assert not check.accepts_fast(1)
    with pytest.raises(Exception, match="elsewhere"):
        list(check.errors(1))  # python-jsonschema cannot resolve it either
