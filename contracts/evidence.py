"""Per-case evidence kept in a certificate, and agreement computed from two certificates.

A certificate keeps, for every case, the must-agree field values of its first valid answer,
a hash of each repeat's answer, the provider ids and the reported models::

    "evidence": {"<case id>": {"agree": {"category": "billing", ...} | null,
                               "answers": ["<sha256 hex>" | null, ...],
                               "provider_ids": ["req_..." | null, ...],
                               "models": ["gpt-4o-2024-08-06" | null, ...]}}

Agreement between a primary P and a fallback F is then a comparison of two stored
certificates for the same contract fingerprint, whatever run made each of them: no run has
to certify both together, and no failover is allowed on a pair nobody compared.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import rfc8785

from contracts.model import Contract


def answer_hash(output: Any) -> str | None:
    """Return sha256 hex over the RFC 8785 canonical JSON of an answer (None: no answer)."""
    if output is None:
        return None
    try:
        data = rfc8785.dumps(output)
    except (rfc8785.CanonicalizationError, TypeError, ValueError):
        data = json.dumps(output, sort_keys=True, ensure_ascii=False, default=str).encode()
    return hashlib.sha256(data).hexdigest()


def agreed_values(contract: Contract, output: Any) -> dict[str, Any]:
    """Return the must-agree fields of an output."""
    if not isinstance(output, dict):
        return {}
    return {f: output.get(f) for f in contract.must_agree}


def case_evidence(
    contract: Contract,
    outputs: Sequence[Any],
    valid: Sequence[bool],
    provider_ids: Sequence[str | None],
    models: Sequence[str | None],
) -> dict[str, Any]:
    """Return one case's evidence: ``valid[i]`` says repeat i's output passed the model layer."""
    first = next((o for o, ok in zip(outputs, valid, strict=False) if ok), None)
    return {
        "agree": agreed_values(contract, first) if first is not None else None,
        "answers": [answer_hash(o) for o in outputs],
        "provider_ids": list(provider_ids),
        "models": list(models),
    }


@dataclasses.dataclass(frozen=True, slots=True)
class Agreement:
    """The must-agree comparison of two certificates."""

    #: False when a side lacks evidence for some case: agreement cannot be computed.
    computable: bool
    #: Cases without evidence on either side (empty when computable).
    missing: tuple[str, ...] = ()
    #: ``{"case", "reason"}`` per disagreeing case.
    failures: tuple[dict[str, str], ...] = ()
    compared: int = 0  #: cases compared

    @property
    def agrees(self) -> bool:
        """Say whether agreement was computed and every case agreed."""
        return self.computable and not self.failures

    @property
    def rate(self) -> float:
        """Return the fraction of compared cases that agreed."""
        return 0.0 if not self.compared else 1 - len(self.failures) / self.compared


def compare_evidence(
    contract: Contract,
    primary: Mapping[str, Any] | None,
    fallback: Mapping[str, Any] | None,
) -> Agreement:
    """Compare two certificates' evidence case by case on the contract's must-agree fields."""
    p_cases = _cases(primary)
    f_cases = _cases(fallback)
    missing = tuple(
        c.id
        for c in contract.cases
        if _agree(p_cases.get(c.id)) is None or _agree(f_cases.get(c.id)) is None
    )
    if missing:
        return Agreement(False, missing=missing)
    failures: list[dict[str, str]] = []
    for case in contract.cases:
        a, b = _agree(p_cases[case.id]) or {}, _agree(f_cases[case.id]) or {}
        diff = [f for f in contract.must_agree if a.get(f) != b.get(f)]
        if diff:
            shown = ", ".join(f"{f}: {a.get(f)!r} vs {b.get(f)!r}" for f in diff)
            failures.append({"case": case.id, "reason": f"disagree on {shown}"})
    return Agreement(True, failures=tuple(failures), compared=len(contract.cases))


def _cases(certificate: Mapping[str, Any] | None) -> Mapping[str, Any]:
    evidence = (certificate or {}).get("evidence")
    return evidence if isinstance(evidence, Mapping) else {}


def _agree(case: Any) -> dict[str, Any] | None:
    if not isinstance(case, Mapping):
        return None
    agree = case.get("agree")
    return agree if isinstance(agree, dict) else None
