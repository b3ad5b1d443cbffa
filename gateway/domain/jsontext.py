"""Strings both databases can store: no U+0000 (PostgreSQL JSONB refuses it) and no
unpaired UTF-16 surrogates (not valid UTF-8). One rule for SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

REPLACEMENT = "\ufffd"


def unstorable_reason(text: str) -> str | None:
    """Say why ``text`` cannot be stored, or None when it can."""
    if "\x00" in text:
        return "contains U+0000"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains an unpaired surrogate"
    return None


def _strings(value: Any) -> Any:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def find_unstorable(value: Any) -> str | None:
    """Return the first reason a JSON value cannot be stored, or None (no recursion)."""
    for text in _strings(value):
        reason = unstorable_reason(text)
        if reason is not None:
            return reason
    return None


def scrub(value: Any) -> Any:
    """Return ``value`` with unstorable characters replaced by U+FFFD (for error details)."""
    if isinstance(value, str):
        if unstorable_reason(value) is None:
            return value
        return value.replace("\x00", REPLACEMENT).encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    return value
