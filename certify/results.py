"""What a certification run produces: per case, per provider x contract unit, per run.

A ``UnitResult`` (one provider on one contract) becomes a certificate for the registry
(``UnitResult.certificate``, format ``onejob.certifications/1``); replay results never
certify. ``reports.contracts_report`` renders a ``CertificationRun``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from typing import Any

from certify.checks import CASE_LAYERS, Check, Layer
from contracts.evidence import case_evidence
from contracts.model import Contract
from contracts.registry import DEFAULT_VALIDITY
from providers.config import ProviderConfig

#: ``stability_basis`` of a certificate whose model refused the contract's temperature.
PASS_K_ALONE = "pass^k alone"


class Mode(enum.StrEnum):
    """How the runner reaches providers."""

    #: Real round trips to the configured endpoints.
    LIVE = "live"
    #: Live, and every exchange written to a scrubbed cassette.
    RECORD = "record"
    #: Cassettes answer through httpx.MockTransport; proves adapters and parsers, never certifies.
    REPLAY = "replay"


@dataclasses.dataclass(slots=True)
class CaseResult:
    """Every layer's outcome for one case on one provider."""

    contract: str
    provider: str
    case: str
    checks: dict[Layer, Check]
    outputs: list[Any]  #: the parsed output of each repeat (None when there was none)
    duration: float  # seconds
    error: str | None = None  #: a harness error (cassette mismatch), not a provider failure
    provider_ids: list[str | None] = dataclasses.field(default_factory=list)  #: per repeat
    models: list[str | None] = dataclasses.field(default_factory=list)  #: reported, per repeat
    valid: list[bool] = dataclasses.field(default_factory=list)  #: passed the model layer
    #: Request parameters the adapter left out in any repeat (the model refuses them).
    omitted_parameters: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """Say whether every certified layer passed."""
        return self.error is None and all(self.checks[layer].passed for layer in CASE_LAYERS)

    def first_failure(self) -> Check | None:
        """Return the first failing layer (the one that explains the case)."""
        for layer in CASE_LAYERS:
            check = self.checks[layer]
            if not check.passed and not check.detail.get("not_reached"):
                return check
        return None


@dataclasses.dataclass(slots=True)
class UnitResult:
    """One provider on one contract: what a certificate is issued for."""

    contract: Contract
    provider: ProviderConfig
    mode: Mode
    repeats: int
    adapter_version: str
    cases: list[CaseResult]
    started_at: dt.datetime
    duration: float  # seconds
    agreement: dict[str, list[Check]] = dataclasses.field(default_factory=dict)
    run_id: str = ""  #: the certification run that produced it

    @property
    def passed(self) -> bool:
        """Say whether every case passed every layer."""
        return bool(self.cases) and all(c.passed for c in self.cases)

    @property
    def errors(self) -> list[str]:
        """Return the harness errors (cassette mismatches) of this unit."""
        return [f"{c.case}: {c.error}" for c in self.cases if c.error]

    @property
    def omitted_parameters(self) -> tuple[str, ...]:
        """Return the request parameters left out of any call, because the model refuses them."""
        return tuple(sorted({p for c in self.cases for p in c.omitted_parameters}))

    @property
    def stability_basis(self) -> str:
        """Say what stability rests on: the contract's temperature and pass^k, or pass^k alone."""
        if "temperature" in self.omitted_parameters:
            return PASS_K_ALONE
        return f"temperature {self.contract.temperature:g} and pass^k"

    def stability_note(self) -> str | None:
        """Return one sentence for reports when stability rests on pass^k alone, else None."""
        if self.stability_basis != PASS_K_ALONE:
            return None
        return (
            f"stability rests on pass^{self.repeats} alone: {self.provider.model} refuses "
            f"temperature, so the contract's temperature {self.contract.temperature:g} was "
            "not sent"
        )

    def pass_rates(self) -> dict[str, float]:
        """Return, per layer, the fraction of cases that passed it."""
        n = len(self.cases) or 1
        rates = {
            layer.value: round(sum(c.checks[layer].passed for c in self.cases) / n, 4)
            for layer in CASE_LAYERS
        }
        for primary, checks in self.agreement.items():
            rates[f"agreement:{primary}"] = round(
                sum(c.passed for c in checks) / (len(checks) or 1), 4
            )
        return rates

    def failures(self) -> list[dict[str, Any]]:
        """Return one entry per failing case: the first broken layer, its reason and excerpt."""
        out: list[dict[str, Any]] = []
        for c in self.cases:
            check = c.first_failure()
            if c.error:
                out.append({"case": c.case, "layer": "harness", "reason": c.error, "excerpt": ""})
            elif check is not None:
                out.append(
                    {
                        "case": c.case,
                        "layer": check.layer.value,
                        "reason": check.reason,
                        "excerpt": check.excerpt,
                    }
                )
        return out

    def certificate(self, validity: dt.timedelta = DEFAULT_VALIDITY) -> dict[str, Any]:
        """Return the registry entry for this unit (``onejob.certifications/1``)."""
        finished = self.started_at + dt.timedelta(seconds=self.duration)
        agreement = {
            primary: {
                "rate": round(sum(c.passed for c in checks) / (len(checks) or 1), 4),
                "failures": [
                    {"case": case.case, "reason": c.reason, "excerpt": c.excerpt}
                    for case, c in zip(self.cases, checks, strict=True)
                    if not c.passed
                ],
            }
            for primary, checks in self.agreement.items()
        }
        return {
            "contract": self.contract.name,
            "contract_fingerprint": self.contract.fingerprint,
            "provider": self.provider.name,
            "protocol": self.provider.protocol,
            "model": self.provider.model,
            "adapter_version": self.adapter_version,
            "mode": self.mode.value,
            "verdict": "pass" if self.passed else "fail",
            "certified_at": _iso(finished),
            "expires_at": _iso(finished + validity),
            "repeats": self.repeats,
            "omitted_parameters": list(self.omitted_parameters),
            "stability_basis": self.stability_basis,
            "cases": len(self.cases),
            "pass_rates": self.pass_rates(),
            "failures": self.failures(),
            "agreement": agreement,
            "run_id": self.run_id,
            "reported_models": sorted({m for c in self.cases for m in c.models if m}),
            "evidence": {
                c.case: case_evidence(self.contract, c.outputs, c.valid, c.provider_ids, c.models)
                for c in self.cases
            },
        }


@dataclasses.dataclass(slots=True)
class CertificationRun:
    """Everything one ``certify`` run found."""

    run_id: str
    mode: Mode
    repeats: int
    units: list[UnitResult]
    started_at: dt.datetime
    duration: float  # seconds

    @property
    def passed(self) -> bool:
        """Say whether every unit passed."""
        return bool(self.units) and all(u.passed for u in self.units)

    @property
    def errors(self) -> list[str]:
        """Return every harness error, prefixed with its provider and contract."""
        return [f"{u.provider.name}/{u.contract.name}/{e}" for u in self.units for e in u.errors]


@dataclasses.dataclass(frozen=True, slots=True)
class Progress:
    """A progress event: one case finished, or one provider x contract unit finished."""

    provider: str
    contract: str
    done: int
    total: int
    unit: UnitResult | None = None


def _iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
