"""OpenAI strict Structured Outputs: translate a JSON Schema into it, and check its rules.

``to_strict_schema`` does what the official SDK's ``to_strict_json_schema`` does for
pydantic models (every object ``additionalProperties: false``, every property required,
``$ref`` with siblings inlined) and more, so that a hand-written contract schema is
accepted: a ``type`` is derived for ``enum``/``const`` schemas, annotations the API does not
take are dropped, and formats it does not know are dropped (they are annotations for the
contract's own validator too). Whatever it cannot say without *loosening* the schema raises
``SchemaNotSupported``; it only ever tightens (making an optional property required), so an
answer valid under the translation is valid under the contract.

``strict_schema_problem`` states the rules the API enforces on ``strict: true`` schemas
(https://platform.openai.com/docs/guides/structured-outputs#supported-schemas); the
simulator refuses with it, and the adapter checks its own translation with it before sending.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from providers.base import SchemaNotSupported

#: ``format`` values strict mode accepts.
SUPPORTED_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)
#: Composition keywords the docs list as unsupported for every model.
UNSUPPORTED = ("allOf", "not", "dependentRequired", "dependentSchemas", "if", "then", "else")
#: Keywords the docs list as unsupported for fine-tuned models (``ft:...``).
UNSUPPORTED_FINE_TUNED = (
    "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "multipleOf",
    "patternProperties", "unevaluatedProperties", "propertyNames", "minProperties",
    "maxProperties", "unevaluatedItems", "contains", "minContains", "maxContains",
    "minItems", "maxItems", "uniqueItems",
)  # fmt: skip
MAX_PROPERTIES = 5000  # object properties in one schema, in total
MAX_DEPTH = 10  # nested object levels
MAX_STRING_CHARS = 120_000  # property names, definition names, enum and const values
MAX_ENUM_VALUES = 1000  # enum values across the schema
LARGE_ENUM = 250  # a string enum longer than this ...
LARGE_ENUM_CHARS = 15_000  # ... may have at most this many characters in all
NAME = re.compile(r"[a-zA-Z0-9_-]+")
MAX_NAME = 64  # characters in ``json_schema.name`` and a function name

#: Keywords the translation keeps (all take part in validation or describe it).
_KEPT = frozenset(
    {
        "type", "properties", "required", "additionalProperties", "items", "anyOf", "enum",
        "const", "$ref", "$defs", "definitions", "title", "description", "pattern", "format",
        "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "multipleOf", "minItems", "maxItems",
    }
)  # fmt: skip
#: Annotations without effect on validation that the translation drops.
_DROPPED = frozenset(
    {
        "$schema", "$id", "$comment", "examples", "default", "readOnly", "writeOnly",
        "deprecated", "contentMediaType", "contentEncoding", "$anchor",
    }
)  # fmt: skip
_JSON_TYPES = {str: "string", bool: "boolean", int: "integer", float: "number"}


def to_strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Return ``schema`` in strict mode's dialect; raise ``SchemaNotSupported`` if it cannot be."""
    root = copy.deepcopy(schema)
    strict = _node(root, (), root)
    if strict.get("type") != "object":
        raise SchemaNotSupported((), "strict mode needs an object at the root")
    problem = strict_schema_problem(strict)
    if problem is not None:
        raise SchemaNotSupported((), problem)
    return strict


def _type_of_values(values: list[Any], path: tuple[str, ...]) -> str | list[str]:
    names: list[str] = []
    for value in values:
        if value is None:
            name = "null"
        elif type(value) in _JSON_TYPES:
            name = _JSON_TYPES[type(value)]
        else:
            raise SchemaNotSupported(path, "enum/const values must be scalars in strict mode")
        if name not in names:
            names.append(name)
    if "integer" in names and "number" in names:
        names.remove("integer")
    return names[0] if len(names) == 1 else names


def _node(node: Any, path: tuple[str, ...], root: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(node, dict):
        raise SchemaNotSupported(path, "a boolean schema has no strict-mode equivalent")
    for key in list(node):
        if key in _DROPPED:
            del node[key]
        elif key not in _KEPT:
            raise SchemaNotSupported(path, f"{key!r} cannot be expressed in strict mode")
    if "$ref" in node and len(node) > 1:
        # Strict mode takes a bare ``$ref`` only; inline it (siblings win, as the SDK does).
        resolved = _resolve(root, node.pop("$ref"), path)
        merged = {**copy.deepcopy(resolved), **node}
        node.clear()
        node.update(merged)
        return _node(node, path, root)
    if "$ref" in node:
        _resolve(root, node["$ref"], path)
        return node
    for defs in ("$defs", "definitions"):
        if isinstance(node.get(defs), dict):
            node[defs] = {
                name: _node(sub, (*path, defs, name), root) for name, sub in node[defs].items()
            }
    if node.get("format") is not None and node["format"] not in SUPPORTED_FORMATS:
        del node["format"]  # an annotation for Draft 2020-12 validators, refused by strict mode
    if "type" not in node and "anyOf" not in node:
        if "enum" in node or "const" in node:
            node["type"] = _type_of_values(
                list(node["enum"]) if "enum" in node else [node["const"]], path
            )
        elif "properties" in node:
            node["type"] = "object"
        elif "items" in node:
            node["type"] = "array"
        else:
            raise SchemaNotSupported(path, "a schema without a type accepts anything")
    types = node.get("type")
    if types == "object" or (isinstance(types, list) and "object" in types):
        extra = node.get("additionalProperties", False)
        if extra is not False:
            raise SchemaNotSupported(path, "strict mode refuses additionalProperties")
        node["additionalProperties"] = False
        props = node.get("properties", {})
        node["properties"] = {
            name: _node(sub, (*path, "properties", name), root) for name, sub in props.items()
        }
        node["required"] = list(node["properties"])
    if "items" in node:
        if not isinstance(node["items"], dict):
            raise SchemaNotSupported(path, "tuple 'items' cannot be expressed in strict mode")
        node["items"] = _node(node["items"], (*path, "items"), root)
    if "anyOf" in node:
        if not isinstance(node["anyOf"], list) or not node["anyOf"]:
            raise SchemaNotSupported(path, "'anyOf' must be a non-empty list")
        node["anyOf"] = [
            _node(sub, (*path, "anyOf", str(i)), root) for i, sub in enumerate(node["anyOf"])
        ]
    return node


def _resolve(root: dict[str, Any], ref: Any, path: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise SchemaNotSupported(path, f"only local $refs can be sent, not {ref!r}")
    target: Any = root
    for part in [p for p in ref[1:].split("/") if p]:
        if not isinstance(target, dict) or part not in target:
            raise SchemaNotSupported(path, f"$ref {ref!r} does not resolve")
        target = target[part]
    if not isinstance(target, dict):
        raise SchemaNotSupported(path, f"$ref {ref!r} is not a schema")
    return target


# -- the rules the API enforces ------------------------------------------------------------


def strict_schema_problem(schema: Any, *, fine_tuned: bool = False) -> str | None:
    """Return why OpenAI refuses ``schema`` under ``strict: true`` (the message text), or None."""
    if not isinstance(schema, dict) or schema.get("type") != "object" or "anyOf" in schema:
        got = schema.get("type") if isinstance(schema, dict) else None
        return f"schema must be a JSON Schema of 'type: \"object\"', got 'type: \"{got}\"'."
    walk = _Walk(fine_tuned)
    problem = walk.node(schema, (), depth=0)
    if problem is not None:
        return problem
    if walk.properties > MAX_PROPERTIES:
        return f"schema has {walk.properties} object properties, more than {MAX_PROPERTIES}."
    if walk.enum_values > MAX_ENUM_VALUES:
        return (
            f"schema has {walk.enum_values} enum values, more than the {MAX_ENUM_VALUES} allowed."
        )
    if walk.chars > MAX_STRING_CHARS:
        return (
            f"the total string length of property names, definition names, enum values and "
            f"const values is {walk.chars}, more than the {MAX_STRING_CHARS} allowed."
        )
    return None


class _Walk:
    def __init__(self, fine_tuned: bool) -> None:
        self.refused = UNSUPPORTED + (UNSUPPORTED_FINE_TUNED if fine_tuned else ())
        self.properties = 0
        self.enum_values = 0
        self.chars = 0

    def node(self, node: Any, path: tuple[str, ...], depth: int) -> str | None:
        where = f"In context={path!r}, "
        if not isinstance(node, dict):
            return f"{where}schema must be an object."
        if "$ref" in node:
            return (
                None
                if len(node) == 1
                else f"{where}$ref cannot have keywords {sorted(set(node) - {'$ref'})}."
            )
        for key in self.refused:
            if key in node:
                return f"{where}'{key}' is not permitted."
        if "type" not in node and "anyOf" not in node:
            return f"{where}schema must have a 'type' key."
        if (fmt := node.get("format")) is not None and fmt not in SUPPORTED_FORMATS:
            return f"{where}'{fmt}' is not a valid format."
        values = node.get("enum", [])
        if isinstance(values, list):
            self.enum_values += len(values)
            texts = [v for v in values if isinstance(v, str)]
            self.chars += sum(map(len, texts))
            if len(texts) > LARGE_ENUM and sum(map(len, texts)) > LARGE_ENUM_CHARS:
                return (
                    f"{where}an enum with more than {LARGE_ENUM} string values may have at most "
                    f"{LARGE_ENUM_CHARS} characters in all."
                )
        if isinstance(node.get("const"), str):
            self.chars += len(node["const"])
        types = node.get("type")
        is_object = types == "object" or (isinstance(types, list) and "object" in types)
        if is_object:
            if depth + 1 > MAX_DEPTH:
                return f"{where}schema is nested more than {MAX_DEPTH} object levels deep."
            if node.get("additionalProperties") is not False:
                return f"{where}'additionalProperties' is required to be supplied and to be false."
            props = node.get("properties", {})
            required = node.get("required", [])
            missing = [p for p in props if not isinstance(required, list) or p not in required]
            if missing:
                return (
                    f"{where}'required' is required to be supplied and to be an array including "
                    f"every key in properties. Missing '{missing[0]}'."
                )
            self.properties += len(props)
            self.chars += sum(map(len, props))
        subs: list[tuple[tuple[str, ...], Any, int]] = []
        for name, sub in (node.get("properties") or {}).items():
            subs.append(((*path, "properties", name), sub, depth + int(is_object)))
        for defs in ("$defs", "definitions"):
            for name, sub in (node.get(defs) or {}).items():
                self.chars += len(name)
                subs.append(((*path, defs, name), sub, 0))
        if "items" in node:
            subs.append(((*path, "items"), node["items"], depth))
        for i, sub in enumerate(node.get("anyOf") or []):
            subs.append(((*path, "anyOf", str(i)), sub, depth))
        for sub_path, sub, sub_depth in subs:
            if (problem := self.node(sub, sub_path, sub_depth)) is not None:
                return problem
        return None


def name_problem(name: Any, field: str) -> tuple[str, str] | None:
    """Return ``(message, code)`` when ``name`` breaks the name rule of ``field``, else None."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        return (
            f"Invalid '{field}': string does not match pattern. Expected a string that matches "
            f"the pattern '^[a-zA-Z0-9_-]+$'.",
            "invalid_value",
        )
    if len(name) > MAX_NAME:
        return (
            f"Invalid '{field}': string too long. Expected a string with maximum length "
            f"{MAX_NAME}, but got a string with length {len(name)} instead.",
            "string_above_max_length",
        )
    return None
