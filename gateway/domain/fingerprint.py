"""Request fingerprint (DESIGN R2): sha256 over RFC 8785 canonical JSON."""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785


class UnfingerprintableInput(ValueError):
    """The input cannot be canonicalized (e.g. an integer beyond the IEEE-754 safe range)."""


def canonical_json(value: Any) -> bytes:
    """Serialize ``value`` as RFC 8785 canonical JSON (key order and number spelling fixed)."""
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise UnfingerprintableInput(str(exc)) from exc


def fingerprint(contract: str, input: Any, provider: str | None) -> str:
    """Return the sha256 hex of what the client asked for, as the client sent it."""
    payload = {"contract": contract, "input": input, "provider": provider}
    return hashlib.sha256(canonical_json(payload)).hexdigest()
