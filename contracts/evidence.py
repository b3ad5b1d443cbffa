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

The variants a run drew (``contracts.variants``) are kept the same way under
``variant_evidence`` (each also naming its ``case`` and ``relations``), with the seed under
``variants.seed``. Two certificates drawn with the same seed hold the same variants (a run
that certified both, or a run given the other's seed): their variants are compared too.
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
    variants_compared: int = 0  #: variants both certificates hold (drawn with one seed)

    @property
    def agrees(self) -> bool:
        """Say whether agreement was computed and every case agreed."""
        return self.computable and not self.failures

    @property
    def rate(self) -> float:
        """Return the fraction of compared cases and variants that agreed."""
        total = self.compared + self.variants_compared
        return 0.0 if not total else 1 - len(self.failures) / total


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
        reason = _disagreement(contract, p_cases[case.id], f_cases[case.id])
        if reason:
            failures.append({"case": case.id, "reason": reason})
    shared = shared_variants(primary, fallback)
    for vid in shared:
        reason = _disagreement(contract, shared[vid][0], shared[vid][1])
        if reason:
            origin = (shared[vid][0] or {}).get("case", "?")
            failures.append({"case": vid, "reason": f"variant of {origin}: {reason}"})
    return Agreement(
        True,
        failures=tuple(failures),
        compared=len(contract.cases),
        variants_compared=len(shared),
    )


def shared_variants(
    primary: Mapping[str, Any] | None, fallback: Mapping[str, Any] | None
) -> dict[str, tuple[Any, Any]]:
    """Return the variants both certificates hold evidence for, when drawn with one seed."""
    seeds = [((c or {}).get("variants") or {}).get("seed") for c in (primary, fallback)]
    if not seeds[0] or seeds[0] != seeds[1]:
        return {}
    p, f = _cases(primary, "variant_evidence"), _cases(fallback, "variant_evidence")
    return {
        vid: (p[vid], f[vid])
        for vid in sorted(set(p) & set(f))
        if _agree(p[vid]) is not None and _agree(f[vid]) is not None
    }


def _disagreement(contract: Contract, primary: Any, fallback: Any) -> str | None:
    a, b = _agree(primary) or {}, _agree(fallback) or {}
    diff = [f for f in contract.must_agree if a.get(f) != b.get(f)]
    if not diff:
        return None
    return "disagree on " + ", ".join(f"{f}: {a.get(f)!r} vs {b.get(f)!r}" for f in diff)


def _cases(certificate: Mapping[str, Any] | None, key: str = "evidence") -> Mapping[str, Any]:
    evidence = (certificate or {}).get(key)
    return evidence if isinstance(evidence, Mapping) else {}


def _agree(case: Any) -> dict[str, Any] | None:
    if not isinstance(case, Mapping):
        return None
    agree = case.get("agree")
    return agree if isinstance(agree, dict) else None
