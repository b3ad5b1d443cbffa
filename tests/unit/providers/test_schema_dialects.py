"""The schema translations keep the contract's meaning, and what they produce is accepted.

Property: for every schema (the catalog's and generated ones), the translation either
refuses (``SchemaNotSupported``) or yields a schema the API's own rules accept, and every
answer valid under the translation is valid under the original.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from contracts.loader import load_catalog
from providers.base import SchemaNotSupported
from providers.gemini import response_schema_problem, to_gemini_schema
from providers.openai import strict_schema_problem, to_strict_schema

CATALOG = load_catalog()
CATALOG_SCHEMAS = [pytest.param(c.output_schema, id=name) for name, c in sorted(CATALOG.items())]
SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None
)


def gemini_as_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """Read a ``responseSchema`` back as the JSON Schema it means (for generating answers)."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "type":
            out["type"] = value.lower()
        elif key == "properties":
            out[key] = {k: gemini_as_json_schema(v) for k, v in value.items()}
        elif key == "items":
            out[key] = gemini_as_json_schema(value)
        elif key == "anyOf":
            out[key] = [gemini_as_json_schema(v) for v in value]
        elif key in ("nullable", "propertyOrdering", "format"):
            continue
        else:
            out[key] = value
    if node.get("nullable"):
        if "type" in out:
            out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        if "anyOf" in out:
            out["anyOf"] = [*out["anyOf"], {"type": "null"}]
    return out


def from_schema(schema: dict[str, Any], root: dict[str, Any] | None = None) -> Any:
    """Generate values valid under ``schema`` (the small dialect the translations produce)."""
    root = schema if root is None else root
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        return from_schema(target, root)
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    if "anyOf" in schema:
        return st.one_of([from_schema(s, root) for s in schema["anyOf"]])
    types = schema.get("type")
    if isinstance(types, list):
        return st.one_of([from_schema({**schema, "type": t}, root) for t in types])
    if types == "null":
        return st.none()
    if types == "boolean":
        return st.booleans()
    if types in ("integer", "number"):
        low, high = schema.get("minimum"), schema.get("maximum")
        if types == "integer":
            return st.integers(low, high)
        return st.floats(low, high, allow_nan=False, allow_infinity=False)
    if types == "string":
        low, high = schema.get("minLength", 0), schema.get("maxLength", 12)
        if "pattern" in schema:
            texts = st.from_regex(schema["pattern"]).filter(lambda t: low <= len(t) <= high)
        else:
            texts = st.text(min_size=low, max_size=high)
        return texts
    if types == "array":
        low = schema.get("minItems", 0)
        return st.lists(
            from_schema(schema["items"], root),
            min_size=low,
            max_size=max(low, schema.get("maxItems", 3)),
        )
    if types == "object":
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        return st.fixed_dictionaries(
            {k: from_schema(v, root) for k, v in props.items() if k in required},
            optional={k: from_schema(v, root) for k, v in props.items() if k not in required},
        )
    raise AssertionError(f"no generator for {schema!r}")


def _answers_keep_meaning(original: dict[str, Any], translated: dict[str, Any], data: Any) -> None:
    answer = data.draw(from_schema(translated), label="answer")
    jsonschema.Draft202012Validator(translated).validate(answer)  # the generator is right
    errors = list(jsonschema.Draft202012Validator(original).iter_errors(answer))
    assert not errors, f"{answer!r} passes the translation but not the contract: {errors[0]}"


# -- generated schemas --------------------------------------------------------------------

NAMES = st.text(alphabet="abcdefgh_", min_size=1, max_size=6)


def _leaf() -> st.SearchStrategy[dict[str, Any]]:
    strings = st.fixed_dictionaries(
        {"type": st.just("string")},
        optional={
            "minLength": st.integers(0, 3),
            "maxLength": st.integers(3, 8),
            "pattern": st.sampled_from(["^[a-z]+$", "^[A-Z]{2}"]),
            "format": st.sampled_from(["date", "uri", "email"]),
        },
    )
    numbers = st.fixed_dictionaries(
        {"type": st.sampled_from(["number", "integer"])},
        optional={"minimum": st.integers(-5, 0), "maximum": st.integers(1, 9)},
    )
    enums = st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, unique=True).map(
        lambda values: {"enum": values}
    )
    mixed_enum = st.just({"enum": [1, "one", None]})
    const = st.sampled_from([{"const": "fixed"}, {"const": 3}])
    nullable = strings.map(lambda s: {**s, "type": ["string", "null"]})
    booleans = st.just({"type": "boolean"})
    return st.one_of(strings, numbers, enums, mixed_enum, const, nullable, booleans)


def _extend(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    objects = st.builds(
        lambda props, required_mask, closed: {
            "type": "object",
            "properties": props,
            "required": [k for k, keep in zip(props, required_mask, strict=False) if keep],
            **({"additionalProperties": False} if closed else {}),
        },
        st.dictionaries(NAMES, children, min_size=1, max_size=4),
        st.lists(st.booleans(), min_size=4, max_size=4),
        st.booleans(),
    )
    arrays = st.builds(
        lambda items, low: {"type": "array", "items": items, "minItems": low},
        children,
        st.integers(0, 2),
    )
    unions = st.lists(children, min_size=2, max_size=3).map(lambda options: {"anyOf": options})
    return st.one_of(objects, arrays, unions)


SCHEMAS = st.recursive(_leaf(), _extend, max_leaves=8).map(
    lambda node: (
        node
        if node.get("type") == "object"
        else {"type": "object", "properties": {"value": node}, "required": ["value"]}
    )
)
#: Keywords neither dialect can say without loosening: the translation must refuse them.
REFUSED = st.sampled_from(
    [
        {"allOf": [{"type": "string"}]},
        {"not": {"type": "string"}},
        {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    ]
)


# -- OpenAI strict ------------------------------------------------------------------------


@pytest.mark.parametrize("schema", CATALOG_SCHEMAS)
def test_every_catalog_schema_translates_to_a_strict_schema_openai_accepts(
    schema: dict[str, Any],
) -> None:
    assert strict_schema_problem(schema) is not None or "enum" not in str(schema)
    assert strict_schema_problem(to_strict_schema(schema)) is None


@pytest.mark.parametrize("schema", CATALOG_SCHEMAS)
@SETTINGS
@given(data=st.data())
def test_every_answer_valid_under_the_strict_catalog_schema_is_valid_under_the_contract(
    schema: dict[str, Any], data: Any
) -> None:
    _answers_keep_meaning(schema, to_strict_schema(schema), data)


@SETTINGS
@given(schema=SCHEMAS, data=st.data())
def test_strict_translation_of_generated_schemas_is_accepted_and_keeps_meaning(
    schema: dict[str, Any], data: Any
) -> None:
    original = copy.deepcopy(schema)
    try:
        translated = to_strict_schema(schema)
    except SchemaNotSupported:
        assume(False)
        return
    assert schema == original  # the contract's own schema is never mutated
    assert strict_schema_problem(translated) is None
    _answers_keep_meaning(original, translated, data)


@SETTINGS
@given(schema=SCHEMAS, bad=REFUSED)
def test_strict_translation_refuses_what_it_cannot_say_rather_than_loosening(
    schema: dict[str, Any], bad: dict[str, Any]
) -> None:
    schema["properties"]["zz_bad"] = bad
    with pytest.raises(SchemaNotSupported):
        to_strict_schema(schema)


def test_strict_translation_inlines_refs_with_siblings_and_keeps_bare_refs() -> None:
    schema = {
        "type": "object",
        "$defs": {"Line": {"type": "object", "properties": {"qty": {"type": "integer"}}}},
        "properties": {
            "first": {"$ref": "#/$defs/Line", "description": "the first line"},
            "rest": {"type": "array", "items": {"$ref": "#/$defs/Line"}},
        },
    }
    strict = to_strict_schema(schema)
    assert strict["properties"]["first"] == {
        "type": "object",
        "properties": {"qty": {"type": "integer"}},
        "description": "the first line",
        "additionalProperties": False,
        "required": ["qty"],
    }
    assert strict["properties"]["rest"]["items"] == {"$ref": "#/$defs/Line"}
    assert strict["$defs"]["Line"]["additionalProperties"] is False


# -- Gemini responseSchema ----------------------------------------------------------------


@pytest.mark.parametrize("schema", CATALOG_SCHEMAS)
def test_every_catalog_schema_translates_to_a_response_schema_gemini_accepts(
    schema: dict[str, Any],
) -> None:
    assert response_schema_problem(schema) is not None  # "$schema" is no Schema field
    assert response_schema_problem(to_gemini_schema(schema)) is None


@pytest.mark.parametrize("schema", CATALOG_SCHEMAS)
@SETTINGS
@given(data=st.data())
def test_every_answer_valid_under_the_gemini_catalog_schema_is_valid_under_the_contract(
    schema: dict[str, Any], data: Any
) -> None:
    _answers_keep_meaning(schema, gemini_as_json_schema(to_gemini_schema(schema)), data)


@SETTINGS
@given(schema=SCHEMAS, data=st.data())
def test_gemini_translation_of_generated_schemas_is_accepted_and_keeps_meaning(
    schema: dict[str, Any], data: Any
) -> None:
    original = copy.deepcopy(schema)
    try:
        translated = to_gemini_schema(schema)
    except SchemaNotSupported:
        assume(False)
        return
    assert response_schema_problem(translated) is None
    _answers_keep_meaning(original, gemini_as_json_schema(translated), data)


@SETTINGS
@given(schema=SCHEMAS, bad=REFUSED)
def test_gemini_translation_refuses_what_it_cannot_say_rather_than_loosening(
    schema: dict[str, Any], bad: dict[str, Any]
) -> None:
    schema["properties"]["zz_bad"] = bad
    with pytest.raises(SchemaNotSupported):
        to_gemini_schema(schema)
