"""Declarative semantic assertions: what a contract's output must mean, not just its shape.

Each assertion reads the output with a JSONPath (``path``) and compares it with a reference
that is a literal (``value``/``values``), a JSONPath into the case's expectations
(``expect``) or into the case's input (``input``). When a referenced expectation is absent
from a case, the assertion does not apply to that case (cases choose what they pin down).

Kinds::

    equals        output at path == reference
    one_of        output at path is one of the reference list
    regex         output at path (a string) matches ``pattern`` (re.search)
    approx        |output at path - reference| <= ``tolerance``
    sum_equals    sum of every value matched by ``paths`` == output at ``total`` (± tolerance)
    count_equals  number of items in the list at path == reference
    max_length    len(output at path) <= reference
    contains      output at path (a string) contains the reference string
    excludes      output at path (a string) contains none of the reference strings
    language      output at path (free text) is written in the reference language, an
                  ISO 639-1 code: fixed (``value = "en"``) or named by the input
                  (``input = "$.language"``); detected offline (``contracts.language``)
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Mapping
from typing import Any

from jsonpath_ng import JSONPath
from jsonpath_ng.exceptions import JsonPathParserError
from jsonpath_ng.ext.parser import parse as jsonpath_parse

from contracts import language

KINDS = frozenset(
    {
        "equals",
        "one_of",
        "regex",
        "approx",
        "sum_equals",
        "count_equals",
        "max_length",
        "contains",
        "excludes",
        "language",
    }
)
DEFAULT_TOLERANCE = 0.01  # absolute, in the unit of the compared numbers

_MISSING = object()


class AssertionSpecError(ValueError):
    """An assertion declaration is malformed."""


@functools.lru_cache(maxsize=1024)
def compile_path(expr: str) -> JSONPath:
    """Parse a JSONPath expression, raising ``AssertionSpecError`` with the expression.

    Cached: jsonpath-ng builds its parser tables on every parse (about 4 ms), and every
    assertion of every answer reads its paths.
    """
    try:
        return jsonpath_parse(expr)
    except (JsonPathParserError, Exception) as exc:  # jsonpath-ng raises bare Exceptions too
        raise AssertionSpecError(f"bad JSONPath {expr!r}: {exc}") from exc


def find_all(path: JSONPath, data: Any) -> list[Any]:
    """Return every value ``path`` matches in ``data``."""
    return [m.value for m in path.find(data)]


def find_one(path: JSONPath, data: Any) -> Any:
    """Return the single value ``path`` matches, or ``_MISSING``."""
    found = find_all(path, data)
    return found[0] if found else _MISSING


@dataclasses.dataclass(frozen=True, slots=True)
class Assertion:
    """One declared semantic check."""

    id: str
    kind: str
    path: str | None = None
    paths: tuple[str, ...] = ()
    total: str | None = None
    value: Any = _MISSING
    expect: str | None = None
    input: str | None = None
    pattern: str | None = None
    tolerance: float = DEFAULT_TOLERANCE
    ignore_case: bool = False
    message: str | None = None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Assertion:
        """Build an assertion from its declaration, checking every field."""
        known = {f.name for f in dataclasses.fields(cls)} | {"values"}
        unknown = set(raw) - known
        if unknown:
            raise AssertionSpecError(f"unknown field(s) {sorted(unknown)}")
        if "id" not in raw or not isinstance(raw["id"], str):
            raise AssertionSpecError("every assertion needs a string 'id'")
        kind = raw.get("kind")
        if kind not in KINDS:
            raise AssertionSpecError(
                f"assertion {raw['id']!r}: kind must be one of {sorted(KINDS)}"
            )
        value: Any = raw.get("value", raw.get("values", _MISSING))
        spec = cls(
            id=raw["id"],
            kind=kind,
            path=raw.get("path"),
            paths=tuple(raw.get("paths", ())),
            total=raw.get("total"),
            value=value,
            expect=raw.get("expect"),
            input=raw.get("input"),
            pattern=raw.get("pattern"),
            tolerance=float(raw.get("tolerance", DEFAULT_TOLERANCE)),
            ignore_case=bool(raw.get("ignore_case", False)),
            message=raw.get("message"),
        )
        spec._check()
        return spec

    def _check(self) -> None:
        where = f"assertion {self.id!r} ({self.kind})"
        if self.kind == "sum_equals":
            if not self.paths or not self.total:
                raise AssertionSpecError(f"{where}: needs 'paths' and 'total'")
            for p in (*self.paths, self.total):
                compile_path(p)
            return
        if not self.path:
            raise AssertionSpecError(f"{where}: needs 'path'")
        compile_path(self.path)
        if self.kind == "regex":
            if not self.pattern:
                raise AssertionSpecError(f"{where}: needs 'pattern'")
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise AssertionSpecError(f"{where}: bad pattern: {exc}") from exc
            return
        refs = [r for r in (self.value is not _MISSING, self.expect, self.input) if r]
        if len(refs) != 1:
            raise AssertionSpecError(f"{where}: give exactly one of value/values, expect, input")
        for ref in (self.expect, self.input):
            if ref:
                compile_path(ref)
        if self.kind == "language" and self.value is not _MISSING:
            try:
                language.check_code(str(self.value))
            except language.UnknownLanguage as exc:
                raise AssertionSpecError(f"{where}: {exc}") from exc

    def evaluate(self, input: Any, output: Any, expect: Mapping[str, Any]) -> str | None:
        """Return why the output breaks this assertion, ``None`` when it holds or does not apply."""
        if self.kind == "sum_equals":
            return self._sum_equals(output)
        assert self.path is not None
        actual = find_one(compile_path(self.path), output)
        if self.kind == "regex":
            assert self.pattern is not None
            flags = re.IGNORECASE if self.ignore_case else 0
            if not isinstance(actual, str) or not re.search(self.pattern, actual, flags):
                return self._fail(f"{self.path} = {_show(actual)} does not match /{self.pattern}/")
            return None
        ref = self._reference(input, expect)
        if ref is _MISSING:
            return None
        return self._compare(actual, ref)

    def _reference(self, input: Any, expect: Mapping[str, Any]) -> Any:
        if self.value is not _MISSING:
            return self.value
        if self.expect:
            return find_one(compile_path(self.expect), expect)
        assert self.input is not None
        found = find_one(compile_path(self.input), input)
        if found is _MISSING:
            # The input path is declared by the contract; a case without it is a catalog bug.
            return _MissingInput(self.input)
        return found

    def _compare(self, actual: Any, ref: Any) -> str | None:
        p = self.path
        if isinstance(ref, _MissingInput):
            return self._fail(f"input has nothing at {ref.path}")
        if actual is _MISSING:
            return self._fail(f"output has nothing at {p}")
        if self.kind == "equals":
            if _norm(actual, self.ignore_case) != _norm(ref, self.ignore_case):
                return self._fail(f"{p} = {_show(actual)}, expected {_show(ref)}")
        elif self.kind == "one_of":
            options = ref if isinstance(ref, list) else [ref]
            if _norm(actual, self.ignore_case) not in [_norm(o, self.ignore_case) for o in options]:
                return self._fail(f"{p} = {_show(actual)}, expected one of {_show(options)}")
        elif self.kind == "approx":
            if not _is_number(actual) or not _is_number(ref):
                return self._fail(f"{p} = {_show(actual)} is not comparable with {_show(ref)}")
            if math.fabs(float(actual) - float(ref)) > self.tolerance:
                return self._fail(
                    f"{p} = {_show(actual)}, expected {_show(ref)} ± {self.tolerance:g}"
                )
        elif self.kind == "count_equals":
            if not isinstance(actual, list) or len(actual) != ref:
                n = len(actual) if isinstance(actual, list) else "not a list"
                return self._fail(f"{p} has {n} item(s), expected {ref}")
        elif self.kind == "max_length":
            if not isinstance(actual, str | list) or len(actual) > int(ref):
                n = len(actual) if isinstance(actual, str | list) else "no length"
                return self._fail(f"{p} has length {n}, limit is {ref}")
        elif self.kind == "contains":
            if not isinstance(actual, str) or _norm(str(ref), self.ignore_case) not in _norm(
                actual, self.ignore_case
            ):
                return self._fail(f"{p} does not contain {_show(ref)}")
        elif self.kind == "language":
            if not isinstance(actual, str) or not isinstance(ref, str):
                return self._fail(f"{p} = {_show(actual)} is not text in language {_show(ref)}")
            try:
                verdict = language.judge(actual, ref)
            except language.UnknownLanguage as exc:
                return self._fail(str(exc))
            if not verdict.ok:
                return self._fail(verdict.describe(p or "(root)"))
        elif self.kind == "excludes":
            banned = ref if isinstance(ref, list) else [ref]
            text = _norm(actual, self.ignore_case) if isinstance(actual, str) else ""
            hits = [b for b in banned if _norm(str(b), self.ignore_case) in text]
            if hits:
                return self._fail(f"{p} contains forbidden {_show(hits)}")
        return None

    def _sum_equals(self, output: Any) -> str | None:
        assert self.total is not None
        parts: list[Any] = []
        for p in self.paths:
            parts.extend(find_all(compile_path(p), output))
        total = find_one(compile_path(self.total), output)
        if total is _MISSING or not _is_number(total):
            return self._fail(f"{self.total} = {_show(total)} is not a number")
        if not all(_is_number(x) for x in parts):
            return self._fail(f"non-numeric value among {', '.join(self.paths)}")
        got = math.fsum(float(x) for x in parts)
        if math.fabs(got - float(total)) > self.tolerance:
            return self._fail(
                f"sum of {' + '.join(self.paths)} = {got:.2f}, but {self.total} = {_show(total)}"
            )
        return None

    def _fail(self, detail: str) -> str:
        prefix = f"{self.id}: "
        return prefix + (f"{self.message} ({detail})" if self.message else detail)


@dataclasses.dataclass(frozen=True, slots=True)
class _MissingInput:
    path: str


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _norm(x: Any, ignore_case: bool) -> Any:
    return x.casefold() if ignore_case and isinstance(x, str) else x


def _show(x: Any) -> str:
    if x is _MISSING:
        return "<missing>"
    text = repr(x)
    return text if len(text) <= 120 else text[:117] + "..."
