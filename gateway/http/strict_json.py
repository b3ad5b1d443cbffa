"""Read a request body as JSON, refusing what a careful server should not accept."""

from __future__ import annotations

import json
import math
from typing import Any

from litestar import Request

from gateway.domain.jsontext import unstorable_reason
from gateway.errors import InvalidInput, MalformedJson

MAX_JSON_DEPTH = 64  # nesting levels of arrays and objects


def parse_json(raw: bytes) -> Any:
    """Decode UTF-8 JSON: no NaN, Infinity, duplicate keys or U+0000; limited nesting."""
    if not raw.strip():
        raise MalformedJson("The request body is empty; a JSON object is expected.")
    try:
        text = raw.decode("utf-8")
        value = json.loads(
            text,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
            object_pairs_hook=_unique_keys,
        )
    except UnicodeDecodeError as exc:
        raise MalformedJson("The request body is not UTF-8.") from exc
    except RecursionError as exc:
        raise MalformedJson("The request body is nested too deeply.") from exc
    except ValueError as exc:  # JSONDecodeError, and integers with too many digits
        raise MalformedJson(f"The request body is not valid JSON: {exc}") from exc
    if _may_be_unstorable(text):
        _check_shape(value)
    return value


async def read_json(request: Request[Any, Any, Any]) -> Any:
    """Read the body (the app's size limit applies while streaming) and parse it."""
    return parse_json(await request.body())


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key[:40]!r}")
        out[key] = value
    return out


def _may_be_unstorable(text: str) -> bool:
    """Say whether the JSON ``text`` could hold what ``_check_shape`` refuses.

    Decoded text has no unpaired surrogate, and JSON allows no raw control character in
    a string, so a U+0000 or a lone surrogate can only come from a ``\\u`` escape; and
    nesting deeper than ``MAX_JSON_DEPTH`` needs more brackets than that (those inside
    strings count too: the bound only errs towards walking). Most bodies have neither,
    and the walk over every string was 2-3 % of a creation.
    """
    return "\\u" in text or text.count("{") + text.count("[") > MAX_JSON_DEPTH


def _check_shape(value: Any) -> None:
    """Refuse nesting deeper than ``MAX_JSON_DEPTH`` and unstorable strings, without recursion.

    PostgreSQL's JSONB cannot store U+0000 and UTF-8 has no unpaired surrogates; refusing
    them everywhere keeps both databases alike.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, str):
            reason = unstorable_reason(item)
            if reason is not None:
                raise InvalidInput(f"A string {reason}; it cannot be stored.")
            continue
        if isinstance(item, dict):
            children: list[Any] = [*item.keys(), *item.values()]
        elif isinstance(item, list):
            children = item
        else:
            continue
        if level > MAX_JSON_DEPTH:
            raise InvalidInput(f"JSON nesting deeper than {MAX_JSON_DEPTH} levels is not accepted.")
        stack.extend((child, level + 1) for child in children)
