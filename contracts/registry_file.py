"""The registry file (``onejob.certifications/1``): read it strictly, write it atomically.

Several processes write it: ``onejob certify`` (certificates) and the gateway's shadow
checks (``suspensions``, issue 38). Each write is a read-modify-write under an exclusive
``flock`` on a lock file beside it (``.<name>.lock``), so neither loses the other's
entries; the file itself is replaced atomically, so readers never take a lock.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

FORMAT = "onejob.certifications/1"
KEY_FIELDS = ("contract", "contract_fingerprint", "provider", "model", "adapter_version", "mode")
#: What every suspension names (``contracts.suspensions``).
SUSPENSION_KEYS = ("contract", "primary", "fallback", "since", "fallback_certified_at")


class RegistryError(Exception):
    """The registry file cannot be read as ``onejob.certifications/1``."""


def iso(t: dt.datetime) -> str:
    """Spell a time as the registry does (UTC, ``Z``)."""
    return t.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def parse_time(text: str) -> dt.datetime:
    """Read a registry timestamp (naive means UTC)."""
    t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def days_to_expiry(certificate: Mapping[str, Any], now: dt.datetime) -> float | None:
    """Days from ``now`` to a certificate's ``expires_at`` (negative once past; None when
    it has none or it cannot be read), to the thousandth: the console's, the API's and
    both processes' ``onejob_certificate_days_to_expiry``."""
    expires_at = certificate.get("expires_at")
    if not isinstance(expires_at, str):
        return None
    try:
        moment = parse_time(expires_at)
    except ValueError:
        return None
    return round((moment - now).total_seconds() / 86_400, 3)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the registry's write lock (across processes) for one read-modify-write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.parent / f".{path.name}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def write_document(
    path: Path, entries: list[dict[str, Any]], suspensions: list[dict[str, Any]]
) -> None:
    """Replace the file atomically (the caller holds ``locked``)."""
    doc: dict[str, Any] = {
        "format": FORMAT,
        "updated_at": iso(dt.datetime.now(dt.UTC)),
        "certificates": entries,
    }
    if suspensions:
        doc["suspensions"] = suspensions
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".cert-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2, ensure_ascii=False, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def read_document(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Return the certificates and the suspensions; raise ``RegistryError`` (fail closed)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return [], []
    except ValueError as exc:
        raise RegistryError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise RegistryError(f"{path}: format is not {FORMAT}")
    entries = doc.get("certificates")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise RegistryError(f"{path}: 'certificates' must be a list of objects")
    for e in entries:
        missing = [f for f in (*KEY_FIELDS, "verdict", "certified_at", "expires_at") if f not in e]
        if missing:
            raise RegistryError(f"{path}: a certificate lacks {missing}")
        _check_types(path, e)
    suspensions = doc.get("suspensions", [])
    if not isinstance(suspensions, list) or not all(isinstance(s, dict) for s in suspensions):
        raise RegistryError(f"{path}: 'suspensions' must be a list of objects")
    for s in suspensions:
        _check_suspension(path, s)
    return entries, suspensions


def _check_suspension(path: Path, entry: Mapping[str, Any]) -> None:
    for field in SUSPENSION_KEYS:
        if not isinstance(entry.get(field), str):
            raise RegistryError(f"{path}: a suspension's {field} must be a string")
    for field in ("since", "fallback_certified_at"):
        try:
            parse_time(entry[field])
        except ValueError as exc:
            raise RegistryError(f"{path}: a suspension's {field} is not a timestamp") from exc


def _check_types(path: Path, entry: Mapping[str, Any]) -> None:
    """Refuse the whole file when a certificate's values are not what we wrote (fail closed)."""
    for field in ("certified_at", "expires_at"):
        value = entry[field]
        try:
            if not isinstance(value, str):
                raise ValueError(f"not a string: {value!r}")
            parse_time(value)
        except ValueError as exc:
            raise RegistryError(f"{path}: {field} is not a timestamp ({exc})") from exc
    for field in ("verdict", "contract", "provider", "mode"):
        if not isinstance(entry.get(field), str):
            raise RegistryError(f"{path}: {field} must be a string")
    for field in ("evidence", "variant_evidence"):
        evidence = entry.get(field)
        if evidence is not None and not (
            isinstance(evidence, dict) and all(isinstance(v, dict) for v in evidence.values())
        ):
            raise RegistryError(f"{path}: {field} must map case ids to objects")
    for field in ("variants", "usage", "budget"):
        if entry.get(field) is not None and not isinstance(entry.get(field), dict):
            raise RegistryError(f"{path}: {field} must be an object")
    for field in ("run_id", "stability_basis"):
        if entry.get(field) is not None and not isinstance(entry.get(field), str):
            raise RegistryError(f"{path}: {field} must be a string")
    omitted = entry.get("omitted_parameters")
    if omitted is not None and not (
        isinstance(omitted, list) and all(isinstance(p, str) for p in omitted)
    ):
        raise RegistryError(f"{path}: omitted_parameters must be a list of strings")
    agreement = entry.get("agreement")
    if agreement is not None and not (
        isinstance(agreement, dict) and all(isinstance(v, dict) for v in agreement.values())
    ):
        raise RegistryError(f"{path}: agreement must map primaries to objects")
    failures = entry.get("failures")
    if failures is not None and not (
        isinstance(failures, list) and all(isinstance(f, dict) for f in failures)
    ):
        raise RegistryError(f"{path}: failures must be a list of objects")
