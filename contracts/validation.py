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
  of 0.01 to it); jsonschema-rs does not. A schema using ``multipleOf`` anywhere is
  checked by python-jsonschema alone.

The other differences go the safe way: jsonschema-rs follows ECMA-262 for ``pattern`` as
the JSON Schema spec says (``\\d`` and ``\\w`` are ASCII, ``$`` does not match before a
final newline), refuses NaN and infinities, and cannot read lone surrogates; each of those
falls back to python-jsonschema's answer. Formats are annotations in draft 2020-12 and
neither validator asserts them. ``tests/unit/contracts/test_validation.py`` checks the
agreement on every catalog contract.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
import jsonschema_rs


def _uses(schema: Any, keyword: str) -> bool:
    """Say whether ``keyword`` appears as a key anywhere in ``schema``."""
    if isinstance(schema, Mapping):
        return keyword in schema or any(_uses(v, keyword) for v in schema.values())
    if isinstance(schema, list):
        return any(_uses(v, keyword) for v in schema)
    return False


class CompiledSchema:
    """One draft 2020-12 schema, compiled for both validators."""

    __slots__ = ("_fast", "judge")

    def __init__(self, schema: dict[str, Any]) -> None:
        #: python-jsonschema's validator: decides every value the fast path does not accept.
        self.judge = jsonschema.Draft202012Validator(schema)
        self._fast: Any = None
        if not _uses(schema, "multipleOf"):
            self._fast = jsonschema_rs.Draft202012Validator(schema, validate_formats=False)

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
        return iter(found)
