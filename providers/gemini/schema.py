"""Gemini ``responseSchema``: translate a JSON Schema into its OpenAPI subset, and its rules.

``responseSchema`` is a ``Schema`` message (https://ai.google.dev/api/caching#Schema): one
``type`` (``STRING``, ``NUMBER``, ``INTEGER``, ``BOOLEAN``, ``ARRAY``, ``OBJECT``), ``nullable``
instead of a ``null`` type, ``enum`` only on strings, ``additionalProperties`` only ``false``,
no ``const`` or ``exclusiveMinimum``. ``to_gemini_schema`` translates (``$ref`` inlined,
``["T", "null"]`` → ``nullable``, ``const`` → ``enum``, annotations dropped, ``propertyOrdering``
on objects of two properties or more, as google-genai 3.6's ``process_schema`` writes it) and
refuses what it cannot say without loosening the schema. ``additionalProperties`` is kept when false
(the API takes ``false`` and refuses anything else, as the google-genai SDK's own check says).
"""

from __future__ import annotations

from typing import Any

from providers.base import SchemaNotSupported

#: The fields of the ``Schema`` message (anything else is "Cannot find field").
SCHEMA_FIELDS = frozenset(
    {
        "type", "format", "title", "description", "nullable", "enum", "maxItems", "minItems",
        "properties", "required", "minProperties", "maxProperties", "minLength", "maxLength",
        "pattern", "example", "anyOf", "propertyOrdering", "default", "items", "minimum",
        "maximum", "additionalProperties",
    }
)  # fmt: skip


def camel(name: str) -> str:
    """Return a proto field name in lowerCamelCase (proto JSON accepts both spellings)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


TYPES = frozenset({"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL"})
#: Keywords that only annotate, dropped by the translation.
_DROPPED = frozenset(
    {"$schema", "$id", "$comment", "examples", "default", "readOnly", "writeOnly",
     "deprecated", "$defs", "definitions"}
)  # fmt: skip
_KEPT = frozenset(
    {"description", "title", "minItems", "maxItems", "minLength", "maxLength", "pattern",
     "minimum", "maximum", "minProperties", "maxProperties", "required"}
)  # fmt: skip
#: String formats ``responseSchema`` takes; others are annotations, dropped.
STRING_FORMATS = frozenset({"date-time", "enum"})
_PROTO = "type.googleapis.com/google.ai.generativelanguage.v1beta"
MAX_REF_DEPTH = 32  # nested $ref resolutions before giving up (recursive schemas)


def to_gemini_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Return ``schema`` as a ``responseSchema``; raise ``SchemaNotSupported`` if it cannot be."""
    defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    return _convert(schema, defs, (), 0)


def _convert(node: Any, defs: dict[str, Any], path: tuple[str, ...], depth: int) -> dict[str, Any]:
    if not isinstance(node, dict):
        raise SchemaNotSupported(path, "a boolean schema has no responseSchema equivalent")
    if "$ref" in node:
        if depth > MAX_REF_DEPTH:
            raise SchemaNotSupported(path, "recursive $refs cannot be inlined")
        name = str(node["$ref"]).rsplit("/", 1)[-1]
        if name not in defs:
            raise SchemaNotSupported(path, f"$ref {node['$ref']!r} does not resolve")
        merged = {**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}
        return _convert(merged, defs, path, depth + 1)
    if node.get("additionalProperties", False) not in (False, True):
        raise SchemaNotSupported(path, "Gemini takes no additionalProperties schema (a map)")
    out: dict[str, Any] = {}
    types = node.get("type")
    names = [types] if isinstance(types, str) else list(types) if isinstance(types, list) else []
    if "null" in names:
        out["nullable"] = True
        names.remove("null")
    enum = [node["const"]] if "const" in node else node.get("enum")
    if enum is not None:
        if not all(isinstance(v, str) or v is None for v in enum):
            raise SchemaNotSupported(path, "responseSchema takes enum only on strings")
        if None in enum:
            out["nullable"] = True
        out["enum"] = [v for v in enum if v is not None]
        if names and names != ["string"]:
            raise SchemaNotSupported(path, "responseSchema takes enum only on strings")
        names = ["string"]
    if len(names) > 1:
        out["anyOf"] = [{"type": n.upper()} for n in names]
    elif names:
        out["type"] = names[0].upper()
    for key, value in node.items():
        if key in ("type", "enum", "const", "$ref") or key in _DROPPED:
            continue
        if key == "additionalProperties":
            if value is False:  # kept: the answer may hold no undeclared key
                out[key] = False
            continue  # ``true`` is the default
        if key in _KEPT:
            out[key] = value
        elif key == "format":
            if names != ["string"] or value in STRING_FORMATS:
                out[key] = value
        elif key == "properties":
            if not value:
                raise SchemaNotSupported(path, "responseSchema needs properties on an object")
            out[key] = {
                k: _convert(v, defs, (*path, "properties", k), depth) for k, v in value.items()
            }
            if len(value) > 1:  # as google-genai's ``process_schema``: one key has no order
                out["propertyOrdering"] = list(value)
        elif key == "items":
            out[key] = _convert(value, defs, (*path, "items"), depth)
        elif key == "anyOf":
            options = [o for o in value if not (isinstance(o, dict) and o.get("type") == "null")]
            if len(options) < len(value):
                out["nullable"] = True
            converted = [
                _convert(o, defs, (*path, "anyOf", str(i)), depth) for i, o in enumerate(options)
            ]
            if len(converted) == 1:
                out.update(converted[0])
            else:
                out[key] = converted
        else:
            raise SchemaNotSupported(path, f"{key!r} cannot be expressed in responseSchema")
    if out.get("type") == "OBJECT" and not out.get("properties"):
        raise SchemaNotSupported(path, "responseSchema needs properties on an object")
    return out


def response_schema_problem(
    schema: Any, where: str = "generation_config.response_schema"
) -> str | None:
    """Return why Gemini refuses ``schema`` as a ``responseSchema`` (its message), or None."""
    if not isinstance(schema, dict):
        return f"Invalid value at '{where}' ({_PROTO}.Schema)"
    schema = {camel(k): v for k, v in schema.items()}
    for key in schema:
        if key not in SCHEMA_FIELDS:
            return (
                f'Invalid JSON payload received. Unknown name "{key}" '
                f"at '{where}': Cannot find field."
            )
    kind = schema.get("type")
    if kind is not None and (not isinstance(kind, str) or kind.upper() not in TYPES):
        return f"Invalid value at '{where}.type' ({_PROTO}.Type), {kind!r}"
    if schema.get("additionalProperties"):
        return (
            "additionalProperties is only supported in Gemini Enterprise Agent Platform mode, "
            "not in Gemini Developer API mode."
        )
    upper = kind.upper() if isinstance(kind, str) else None
    field = "* GenerateContentRequest." + where
    if "enum" in schema and upper != "STRING":
        return f"{field}.enum: only allowed for STRING type"
    if upper == "OBJECT" and not schema.get("properties"):
        return f"{field}.properties: should be non-empty for OBJECT type"
    for name in schema.get("required") or []:
        if name not in (schema.get("properties") or {}):
            return f"{field}.required[{name}]: property is not defined"
    for i, (name, sub) in enumerate((schema.get("properties") or {}).items()):
        del name
        if (problem := response_schema_problem(sub, f"{where}.properties[{i}].value")) is not None:
            return problem
    if "items" in schema and (
        problem := response_schema_problem(schema["items"], f"{where}.items")
    ):
        return problem
    for i, sub in enumerate(schema.get("anyOf") or []):
        if (problem := response_schema_problem(sub, f"{where}.any_of[{i}]")) is not None:
            return problem
    return None
