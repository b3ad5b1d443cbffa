"""JSON Schema validation compiled once per schema, with a fast path for valid values.

A contract's input schema is checked on every ``POST /v1/jobs`` and its output schema on
every answer. Building a python-jsonschema validator per call and walking the value in
Python cost ~150 µs of a creation's CPU; jsonschema-rs (the Rust implementation, already
what schemathesis validates with) says "valid" in ~2 µs.

python-jsonschema stays the judge. jsonschema-rs only answers the common case, a value it
finds valid, and everything it refuses (or cannot read) goes to python-jsonschema, which
decides and writes the messages. So the fast path can only change an answer where
jsonschema-rs accepts a value python-jsonschema refuses. The known cases are kept off it:

- ``multipleOf`` with a fraction: python-jsonschema divides floats (0.07 is not a multiple
  of 0.01 to it); jsonschema-rs does not.
- a regular expression's negated or boundary classes: jsonschema-rs follows ECMA-262 as
  the JSON Schema spec says, where ``\\d``, ``\\w`` and ``\\s`` are narrower than
  Python's, so ``\\D``, ``\\W``, ``\\S``, a negated set holding a class
  (``[^\\d]``), ``\\b`` and ``\\B`` are wider (``\\S`` takes U+001F there, not in
  Python); ``\\p`` and ``\\P`` differ by engine.

A schema with either anywhere (a ``pattern``, or a ``patternProperties`` key) is checked
by python-jsonschema alone, and so is one jsonschema-rs cannot compile (it is built
offline: no remote ``$ref`` is fetched). The other differences go the safe way: the
plain classes are narrower, NaN, the infinities and lone surrogates are refused or
unreadable; each of those falls back to python-jsonschema's answer.

One difference the judge is told about: ``$``. In ECMA-262 (without the ``m`` flag) it
matches at the end of the text only; in Python it also matches before a final newline,
so ``^DOC-[0-9]{4}$`` took ``"DOC-1234\n"``. The judge is built on a copy of the schema
whose patterns say ``\\Z`` where they say ``$`` (``ecma_end``), and its messages name the
pattern as the contract wrote it. Formats are annotations in draft 2020-12 and neither
validator asserts them. ``tests/unit/contracts/test_contract_validation.py`` checks the
agreement on every catalog contract.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
import jsonschema_rs

#: Regex pieces whose ECMA-262 meaning is wider than Python's (or engine-specific).
_WIDER_IN_ECMA = re.compile(r"\\[DWSbBpP]|\[\^[^\]]*\\[dws]")


def _uses(schema: Any, keyword: str) -> bool:
    """Say whether ``keyword`` appears as a key anywhere in ``schema``."""
    if isinstance(schema, Mapping):
        return keyword in schema or any(_uses(v, keyword) for v in schema.values())
    if isinstance(schema, list):
        return any(_uses(v, keyword) for v in schema)
    return False


def _patterns(schema: Any) -> Iterator[str]:
    """Every regular expression in ``schema``: ``pattern`` values, ``patternProperties`` keys."""
    if isinstance(schema, Mapping):
        if isinstance(schema.get("pattern"), str):
            yield schema["pattern"]
        if isinstance(schema.get("patternProperties"), Mapping):
            yield from (k for k in schema["patternProperties"] if isinstance(k, str))
        for value in schema.values():
            yield from _patterns(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _patterns(value)


#: Keywords whose values are data, not schemas: their strings are not patterns.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
#: Keywords whose values map names to schemas (the names are not keywords).
_NAMED_SCHEMAS = frozenset({"properties", "$defs", "definitions", "dependentSchemas"})


def ecma_end(pattern: str) -> str:
    """Return ``pattern`` with each ``$`` anchor (outside a class, unescaped) as ``\\Z``.

    That is ECMA-262's ``$`` in Python's ``re``: the end of the text, not also the place
    before a final newline. A set opening with ``]`` (``[]a]``, ``[^]a]``) is read as
    Python reads it: the ``]`` is a member.
    """
    out: list[str] = []
    i, in_set = 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_set:
            in_set = char != "]"
        elif char == "[":
            in_set = True
            start = i + 1
            if pattern.startswith("^", start):
                start += 1
            if pattern.startswith("]", start):  # a literal ], as Python reads it
                out.append(pattern[i : start + 1])
                i = start + 1
                continue
        elif char == "$":
            char = "\\Z"
        out.append(char)
        i += 1
    return "".join(out)


def _ecma_schema(schema: Any, originals: dict[str, str]) -> Any:
    """Copy ``schema`` with every pattern through ``ecma_end``; remember each original."""
    if isinstance(schema, list):
        return [_ecma_schema(item, originals) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    copy: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DATA_KEYWORDS:
            copy[key] = value
        elif key == "pattern" and isinstance(value, str):
            copy[key] = ecma_end(value)
            originals[copy[key]] = value
        elif key == "patternProperties" and isinstance(value, Mapping):
            copy[key] = {}
            for name, sub in value.items():
                translated = ecma_end(name) if isinstance(name, str) else name
                originals[translated] = name
                copy[key][translated] = _ecma_schema(sub, originals)
        elif key in _NAMED_SCHEMAS and isinstance(value, Mapping):
            copy[key] = {name: _ecma_schema(sub, originals) for name, sub in value.items()}
        else:
            copy[key] = _ecma_schema(value, originals)
    return copy


def _fast_path_safe(schema: Any) -> bool:
    """Say whether jsonschema-rs may answer "valid" for ``schema`` (module docstring)."""
    if _uses(schema, "multipleOf"):
        return False
    return not any(_WIDER_IN_ECMA.search(p) for p in _patterns(schema))


class CompiledSchema:
    """One draft 2020-12 schema, compiled for both validators."""

    __slots__ = ("_fast", "_originals", "judge")

    def __init__(self, schema: dict[str, Any]) -> None:
        #: python-jsonschema's validator: decides every value the fast path does not accept
        #: (on the schema with ECMA-262's ``$``: ``ecma_end``).
        self._originals: dict[str, str] = {}
        self.judge = jsonschema.Draft202012Validator(_ecma_schema(schema, self._originals))
        self._fast: Any = None
        if _fast_path_safe(schema):
            try:
                self._fast = jsonschema_rs.Draft202012Validator(
                    schema, validate_formats=False, offline=True
                )
            except (ValueError, jsonschema_rs.ValidationError):
                self._fast = None  # python-jsonschema alone, as before

    def accepts_fast(self, value: Any) -> bool:
        """True when jsonschema-rs finds ``value`` valid (False: ask the judge)."""
        if self._fast is None:
            return False
        try:
            return bool(self._fast.is_valid(value))
        except (ValueError, TypeError, OverflowError, UnicodeError):
            return False  # a value it cannot read (a lone surrogate, say)

    def errors(self, value: Any) -> Iterator[jsonschema.ValidationError]:
        """Yield ``value``'s errors in path order (none when it is valid)."""
        if self.accepts_fast(value):
            return iter(())
        found = sorted(self.judge.iter_errors(value), key=lambda e: list(e.absolute_path))
        for error in found:
            self._as_written(error)
        return iter(found)

    def _as_written(self, error: jsonschema.ValidationError) -> None:
        """Name the patterns in ``error`` (and its causes) as the schema wrote them."""
        if error.validator == "pattern" and error.validator_value in self._originals:
            original = self._originals[error.validator_value]
            error.message = f"{error.instance!r} does not match {original!r}"
            error.validator_value = original
        elif error.validator == "additionalProperties" and isinstance(error.schema, Mapping):
            # "'b' does not match any of the regexes: '^a\\Z'": the judge lists its
            # (translated) ``patternProperties`` keys, sorted, at the end of the message.
            keys = error.schema.get("patternProperties")
            if isinstance(keys, Mapping) and all(isinstance(k, str) for k in keys):
                judged = ", ".join(repr(k) for k in sorted(keys))
                as_written = sorted(self._originals.get(str(k), str(k)) for k in keys)
                written = ", ".join(repr(k) for k in as_written)
                if error.message.endswith(judged):
                    error.message = error.message[: len(error.message) - len(judged)] + written
        for cause in error.context or ():
            self._as_written(cause)
