"""What a certification run produces: per case, per provider x contract unit, per run.

A ``UnitResult`` (one provider on one contract) becomes a certificate for the registry
(``UnitResult.certificate``, format ``onejob.certifications/1``);
replay results never certify. Besides the catalog's cases, a unit holds the variants drawn
for the run (``contracts.variants``), judged as one layer, and its calls' latency and
tokens, judged against the contract's budget; its certificate keeps the variants' seed and
evidence (``variants``, ``variant_evidence``), the ``usage`` and the ``budget``, and what
its answers on production inputs showed (``production``: counts, field names, hashes).
``reports.contracts_report`` renders a ``CertificationRun``.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import enum
from typing import Any

from certify.checks import CASE_LAYERS, Check, Layer
from certify.production import ProductionResult
from certify.usage import CallUsage, Price, UsageSummary, check_budget, summarize
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
    usage: list[CallUsage] = dataclasses.field(default_factory=list)  #: per call made
    variant_of: str | None = None  #: the catalog case a variant was drawn from
    relations: tuple[str, ...] = ()  #: the relations that drew a variant

    @property
    def variation(self) -> str:
        """Return the relations that drew this variant, as one name."""
        return "+".join(self.relations)

    def evidence(self, contract: Contract) -> dict[str, Any]:
        """Return the case's evidence for a certificate (``contracts.evidence``)."""
        found = case_evidence(contract, self.outputs, self.valid, self.provider_ids, self.models)
        if self.variant_of is not None:
            return {"case": self.variant_of, "relations": list(self.relations), **found}
        return found

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
    #: Per primary, the agreement of every case and then every variant (``checked``).
    agreement: dict[str, list[Check]] = dataclasses.field(default_factory=dict)
    run_id: str = ""  #: the certification run that produced it
    variants: list[CaseResult] = dataclasses.field(default_factory=list)
    seed: str = ""  #: what the variants were drawn with (the run id unless one was given)
    variants_skipped: str | None = None  #: why no variant was run, when none was
    price: Price | None = None  #: what the provider charges, when known
    #: Its answers on production inputs, per primary (``--production N``).
    production: list[ProductionResult] = dataclasses.field(default_factory=list)

    @property
    def checked(self) -> list[CaseResult]:
        """Return the catalog's cases, then the variants."""
        return [*self.cases, *self.variants]

    @property
    def passed(self) -> bool:
        """Say whether every case, every variant and the budget passed."""
        return (
            bool(self.cases or self.variants)
            and all(c.passed for c in self.cases)
            and self.variant_check().passed
            and self.budget_check().passed
            and all(p.check().passed for p in self.production)
        )

    @property
    def errors(self) -> list[str]:
        """Return the harness errors (cassette mismatches) of this unit."""
        return [f"{c.case}: {c.error}" for c in self.checked if c.error]

    def variant_check(self) -> Check:
        """Pass when every variant passed every case layer; name the first that did not."""
        failing = [v for v in self.variants if not v.passed]
        detail = {"drawn": len(self.variants), "passed": len(self.variants) - len(failing)}
        if not failing:
            return Check(Layer.VARIANTS, True, detail=detail)
        v = failing[0]
        check = v.first_failure()
        why = f"{check.layer.value}: {check.reason}" if check else f"harness: {v.error}"
        return Check(
            Layer.VARIANTS,
            False,
            f"{len(failing)} of {len(self.variants)} variant(s) failed; first {v.case} "
            f"({v.variation} of case {v.variant_of}): {why}",
            check.excerpt if check else "",
            detail,
        )

    def usage_summary(self) -> UsageSummary:
        """Return latency percentiles, tokens and cost over every call of the unit."""
        return summarize([u for c in self.checked for u in c.usage], self.price)

    def budget_check(self) -> Check:
        """Check the unit's calls against the contract's budget (latency not in replay)."""
        return check_budget(
            self.contract.budget,
            self.usage_summary(),
            self.provider.name,
            judge_latency=self.mode is not Mode.REPLAY,
        )

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
        if self.variants:
            rates[Layer.VARIANTS.value] = round(
                sum(v.passed for v in self.variants) / len(self.variants), 4
            )
        if self.contract.budget.declared:
            rates[Layer.BUDGET.value] = 1.0 if self.budget_check().passed else 0.0
        for sample in self.production:
            if sample.judged:
                rates[f"{Layer.PRODUCTION.value}:{sample.draw.primary}"] = round(
                    1 - sample.disagreed / sample.judged, 4
                )
        for primary, checks in self.agreement.items():
            rates[f"agreement:{primary}"] = round(
                sum(c.passed for c in checks) / (len(checks) or 1), 4
            )
        return rates

    def failures(self) -> list[dict[str, Any]]:
        """Return one entry per failing case and variant (its first broken layer), and the
        budget when it is exceeded; a variant's entry names the layer ``variants``, the case
        it was drawn from, and the variation."""
        out: list[dict[str, Any]] = []
        for c in self.checked:
            check = c.first_failure()
            entry: dict[str, Any]
            if c.error:
                entry = {"case": c.case, "layer": "harness", "reason": c.error, "excerpt": ""}
            elif check is not None:
                entry = {
                    "case": c.case,
                    "layer": check.layer.value,
                    "reason": check.reason,
                    "excerpt": check.excerpt,
                }
            else:
                continue
            if c.variant_of is not None:
                entry = {
                    "case": c.variant_of,
                    "layer": Layer.VARIANTS.value,
                    "reason": f"variant {c.case} ({c.variation}) failed at {entry['layer']}: "
                    f"{entry['reason']}",
                    "excerpt": entry["excerpt"],
                    "variant": c.case,
                    "relations": list(c.relations),
                    "variant_layer": entry["layer"],
                }
            out.append(entry)
        budget = self.budget_check()
        if not budget.passed:
            out.append({"case": "(all)", "layer": "budget", "reason": budget.reason, "excerpt": ""})
        for sample in self.production:
            check = sample.check()
            if not check.passed:  # field names only: production values are never kept
                out.append(
                    {"case": "(production)", "layer": "production", "reason": check.reason,
                     "excerpt": "", "fields": sample.fields()}
                )  # fmt: skip
        return out

    def certificate(self, validity: dt.timedelta = DEFAULT_VALIDITY) -> dict[str, Any]:
        """Return the registry entry for this unit (``onejob.certifications/1``)."""
        return _certificate(self, validity)


@dataclasses.dataclass(slots=True)
class CertificationRun:
    """Everything one ``certify`` run found."""

    run_id: str
    mode: Mode
    repeats: int
    units: list[UnitResult]
    started_at: dt.datetime
    duration: float  # seconds
    seed: str = ""  #: what the variants were drawn with

    @property
    def passed(self) -> bool:
        """Say whether every unit passed."""
        return bool(self.units) and all(u.passed for u in self.units)

    @property
    def calls(self) -> tuple[int, int]:
        """Return the calls made for the catalog's cases and for the variants."""
        fixed = sum(len(c.usage) for u in self.units for c in u.cases)
        return fixed, sum(len(c.usage) for u in self.units for c in u.variants)

    def production_line(self) -> str | None:
        """Return the summary's sentence on production samples: per fallback and contract
        what they showed, and the extra calls (none to a primary); None when none ran."""
        samples = [(u, p) for u in self.units for p in u.production]
        if not samples:
            return None
        calls = sum(len(p.checks) for _, p in samples)
        lines = [f"  {u.provider.name} on {u.contract.name}: {p.line()}" for u, p in samples]
        return (
            f"production: {calls} extra call(s) to the fallbacks, none to a primary\n"
            + "\n".join(lines)
        )

    def variants_line(self) -> str:
        """Return the summary's sentence on the variants: drawn, extra calls, the seed."""
        drawn = {(u.contract.name, v.case) for u in self.units for v in u.variants}
        skipped = {u.variants_skipped for u in self.units if u.variants_skipped}
        if not drawn:
            why = next(iter(skipped), "no contract declares relations, or --variants 0")
            return f"variants: none run ({why})"
        fixed, extra = self.calls
        share = f" (+{extra / fixed:.0%} over the {fixed} calls of the catalog's cases)"
        return (
            f"variants: {len(drawn)} drawn over {len({c for c, _ in drawn})} contract(s) with "
            f"seed {self.seed}; {extra} extra call(s){share if fixed else ''}; "
            f"replay them with --seed {self.seed}"
        )

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


def _certificate(unit: UnitResult, validity: dt.timedelta) -> dict[str, Any]:
    finished = unit.started_at + dt.timedelta(seconds=unit.duration)
    results = unit.checked
    agreement = {
        primary: {
            "rate": round(sum(c.passed for c in checks) / (len(checks) or 1), 4),
            "failures": [
                {"case": case.case, "reason": c.reason, "excerpt": c.excerpt}
                for case, c in zip(results, checks, strict=True)
                if not c.passed
            ],
        }
        for primary, checks in unit.agreement.items()
    }
    budget = unit.budget_check()
    return {
        "contract": unit.contract.name,
        "contract_fingerprint": unit.contract.fingerprint,
        "provider": unit.provider.name,
        "protocol": unit.provider.protocol,
        "model": unit.provider.model,
        "adapter_version": unit.adapter_version,
        "mode": unit.mode.value,
        "verdict": "pass" if unit.passed else "fail",
        "certified_at": iso(finished),
        "expires_at": iso(finished + validity),
        "repeats": unit.repeats,
        "omitted_parameters": list(unit.omitted_parameters),
        "stability_basis": unit.stability_basis,
        "cases": len(unit.cases),
        "pass_rates": unit.pass_rates(),
        "failures": unit.failures(),
        "agreement": agreement,
        "run_id": unit.run_id,
        "reported_models": sorted({m for c in results for m in c.models if m}),
        "evidence": {c.case: c.evidence(unit.contract) for c in unit.cases},
        "variants": variants_summary(unit),
        "variant_evidence": {v.case: v.evidence(unit.contract) for v in unit.variants},
        "usage": unit.usage_summary().as_dict(),
        "production": [p.as_dict() for p in unit.production],
        "budget": {
            "declared": {k: v for k, v in unit.contract.budget.as_dict().items() if v is not None},
            "passed": budget.passed,
            "reason": budget.reason,
            **({"latency": budget.detail["latency"]} if "latency" in budget.detail else {}),
            **(
                {"tokens_estimated": budget.detail["tokens_estimated"]}
                if "tokens_estimated" in budget.detail
                else {}
            ),
        },
    }


def variants_summary(unit: UnitResult) -> dict[str, Any]:
    """Return what the unit's variants were: seed, how many, passed, calls, per relation."""
    relations = collections.Counter(r for v in unit.variants for r in v.relations)
    return {
        "seed": unit.seed,
        "drawn": len(unit.variants),
        "passed": sum(v.passed for v in unit.variants),
        "calls": sum(len(v.usage) for v in unit.variants),
        "relations": dict(sorted(relations.items())),
        "skipped": unit.variants_skipped,
    }


def iso(t: dt.datetime) -> str:
    """Return a UTC timestamp as ``2026-03-01T10:00:00Z``."""
    return t.astimezone(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
