"""Render a certification run: ``contracts.json``, ``contracts.html``, ``contracts.junit.xml``.

The HTML page starts with the decision: each primary -> fallback pair the run compared,
allowed or refused by the certification registry with the reason words of
``onejob can-i-failover``, and the certificate behind each side (model, fingerprint,
expiry; ``reports/failover_table.py``). Then a provider x contract matrix a person reads
at a glance (each contract's fingerprint, each cell's model and expiry; green: certified,
red: failed, with the first broken layer, the variants passed, p95 latency, tokens and cost
per case against the budget, and a caveat where stability rests on pass^k alone because
the model refused temperature), then what changed since a previous run (``--compare``),
the latency and cost table, the variants drawn (each with its case and relations), and
every failure explained: the case (and variant), the layer, the exact reason and an
excerpt of the offending output. The template is ``templates/contracts.html.j2``.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import jinja2

from certify.checks import CASE_LAYERS
from certify.compare import Comparison
from certify.results import CaseResult, CertificationRun, UnitResult, variants_summary
from certify.usage import usd
from contracts.registry import DEFAULT_VALIDITY, CertificationRegistry
from reports.failover_table import failover_rows, short
from reports.junit import JunitCase, write_junit

FORMAT = "onejob.contracts-report/1"
SUITE_NAME = "onejob.contracts"
TEMPLATES = Path(__file__).parent / "templates"


def _case_json(unit: UnitResult, c: CaseResult) -> dict[str, Any]:
    first = c.first_failure()
    out: dict[str, Any] = {
        "case": c.case,
        "passed": c.passed,
        "error": c.error,
        "why": f"{first.layer.value}: {first.reason}" if first else (c.error or ""),
        "agree": c.evidence(unit.contract)["agree"],
        "duration_s": round(c.duration, 3),
        "layers": {
            layer.value: {
                "passed": c.checks[layer].passed,
                "reason": c.checks[layer].reason,
                "excerpt": c.checks[layer].excerpt,
            }
            for layer in CASE_LAYERS
        },
    }
    if c.variant_of is not None:
        out = {"case": c.case, "variant_of": c.variant_of, "relations": list(c.relations)} | out
    return out


def unit_json(unit: UnitResult) -> dict[str, Any]:
    """Return one provider x contract result as JSON."""
    budget = unit.budget_check()
    return {
        "provider": unit.provider.name,
        "protocol": unit.provider.protocol,
        "model": unit.provider.model,
        "contract": unit.contract.name,
        "contract_fingerprint": unit.contract.fingerprint,
        "adapter_version": unit.adapter_version,
        "verdict": "pass" if unit.passed else "fail",
        "duration_s": round(unit.duration, 3),
        "omitted_parameters": list(unit.omitted_parameters),
        "stability_basis": unit.stability_basis,
        "pass_rates": unit.pass_rates(),
        "failures": unit.failures(),
        "variants": variants_summary(unit),
        "production": [p.as_dict() for p in unit.production],
        "usage": unit.usage_summary().as_dict(),
        "budget": {
            "declared": {k: v for k, v in unit.contract.budget.as_dict().items() if v is not None},
            "passed": budget.passed,
            "reason": budget.reason,
        },
        "cases": [_case_json(unit, c) for c in unit.cases],
        "variant_cases": [_case_json(unit, v) for v in unit.variants],
        "agreement": {
            primary: [
                {"case": case.case, "passed": chk.passed, "reason": chk.reason}
                for case, chk in zip(unit.checked, checks, strict=True)
            ]
            for primary, checks in unit.agreement.items()
        },
    }


def run_json(run: CertificationRun, comparison: Comparison | None = None) -> dict[str, Any]:
    """Return the whole run as JSON."""
    fixed, extra = run.calls
    return {
        "format": FORMAT,
        "run_id": run.run_id,
        "seed": run.seed,
        "mode": run.mode.value,
        "certifies": run.mode.value != "replay",
        "repeats": run.repeats,
        "started_at": run.started_at.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "duration_s": round(run.duration, 3),
        "passed": run.passed,
        "errors": run.errors,
        "calls": {
            "cases": fixed,
            "variants": extra,
            "production": sum(len(p.checks) for u in run.units for p in u.production),
        },
        "units": [unit_json(u) for u in run.units],
        "comparison": comparison.as_dict() if comparison else None,
    }


def _junit_case(unit: UnitResult, c: CaseResult) -> JunitCase:
    first = c.first_failure()
    layers = "\n".join(
        f"{'ok  ' if c.checks[lyr].passed else 'FAIL'} {lyr.value} {c.checks[lyr].reason}"
        for lyr in CASE_LAYERS
    )
    name = c.case if c.variant_of is None else f"{c.case} [{c.variation} of {c.variant_of}]"
    where = "variants: " if c.variant_of is not None else ""
    return JunitCase(
        name=name,
        classname=f"{SUITE_NAME}.{unit.provider.name}.{unit.contract.name}",
        time=c.duration,
        failure=f"{where}{first.layer.value}: {first.reason}" if first else None,
        failure_text=f"{layers}\n\noutput: {first.excerpt}" if first else "",
        error=c.error,
        system_out=layers,
        failure_type="ContractViolation",
    )


def junit_cases(run: CertificationRun, comparison: Comparison | None = None) -> list[JunitCase]:
    """Return a JUnit test case per case and variant, per budget, and per change."""
    out: list[JunitCase] = []
    for unit in run.units:
        out.extend(_junit_case(unit, c) for c in unit.checked)
        if unit.contract.budget.declared:
            budget = unit.budget_check()
            out.append(
                JunitCase(
                    name="(budget)",
                    classname=f"{SUITE_NAME}.{unit.provider.name}.{unit.contract.name}",
                    failure=f"budget: {budget.reason}" if not budget.passed else None,
                    system_out=unit.usage_summary().brief(),
                    failure_type="BudgetExceeded",
                )
            )
    for change in comparison.changes if comparison else ():
        out.append(
            JunitCase(
                name=f"{change.item}: {change.kind}",
                classname=f"{SUITE_NAME}.changes.{change.provider}.{change.contract}",
                failure=change.detail if change.regression else None,
                system_out=f"{change.line()} (since {comparison.source})" if comparison else "",
                failure_type="Drift",
            )
        )
    return out


def _cell(u: UnitResult, validity: dt.timedelta) -> dict[str, Any]:
    fails = u.failures()
    certificate = u.certificate(validity)
    layers = sorted({f["layer"] for f in fails})
    budget = u.budget_check()
    limits = ", ".join(
        f"{k} {v:g}" for k, v in u.contract.budget.as_dict().items() if v is not None
    )
    return {
        "passed": u.passed,
        "model": u.provider.model,
        "adapter": u.adapter_version,
        "certified_at": certificate["certified_at"],
        "expires_at": certificate["expires_at"],
        "rates": u.pass_rates(),
        "note": u.stability_note(),
        "first": (
            f"{len(fails)} failure(s) at {', '.join(layers)}; "
            f"first: {fails[0]['case']}: {_clip(fails[0]['reason'], 160)}"
            if fails
            else "no case failed"
        ),
        "variants": (
            f"{sum(v.passed for v in u.variants)}/{len(u.variants)} passed (seed {u.seed})"
            if u.variants
            else (u.variants_skipped or "none drawn")
        ),
        "usage": u.usage_summary().brief(),
        "budget": ("" if budget.passed else "EXCEEDED: ") + limits if limits else "",
    }


def _usage_row(u: UnitResult) -> dict[str, Any]:
    usage, budget = u.usage_summary(), u.budget_check()
    lat = usage.latency_ms
    return {
        "provider": u.provider.name,
        "contract": u.contract.name,
        "calls": usage.calls,
        "latency": " / ".join(f"{lat[k]:,.0f}" for k in ("p50", "p95", "p99", "max"))
        if lat
        else "-",
        "tokens": f"{usage.output_tokens_per_case:,.0f} ({usage.output_tokens_max}){usage.mark}"
        if usage.output_tokens_per_case is not None
        else "-",
        "cost": usd(usage.cost_per_case_usd) if usage.cost_per_case_usd is not None else "-",
        "budget_ok": budget.passed,
        "budget": budget.reason
        or "; ".join(
            n for n in (budget.detail.get("latency"), budget.detail.get("tokens_estimated")) if n
        )
        or "within",
    }


def html_report(
    run: CertificationRun,
    comparison: Comparison | None = None,
    *,
    failover: list[dict[str, Any]] | None = None,
    validity: dt.timedelta = DEFAULT_VALIDITY,
) -> str:
    """Return the HTML page: the failover decisions, then the matrix and the details."""
    providers = list(dict.fromkeys(u.provider.name for u in run.units))
    contracts = sorted({u.contract.name for u in run.units})
    fingerprints = {u.contract.name: u.contract.fingerprint for u in run.units}
    drawn: dict[str, dict[str, CaseResult]] = {c: {} for c in contracts}
    for u in run.units:
        for v in u.variants:
            drawn[u.contract.name].setdefault(v.case, v)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    return env.get_template("contracts.html.j2").render(
        run_id=run.run_id,
        mode=run.mode.value,
        repeats=run.repeats,
        started_at=run.started_at.isoformat(timespec="seconds"),
        duration=run.duration,
        passed=run.passed,
        errors=run.errors,
        variants_line=run.variants_line(),
        production_line=run.production_line(),
        providers=providers,
        contracts=contracts,
        fingerprints=fingerprints,
        short=short,
        failover=failover_rows(run, validity=validity) if failover is None else failover,
        cells={(u.provider.name, u.contract.name): _cell(u, validity) for u in run.units},
        comparison=comparison,
        usage_rows=[_usage_row(u) for u in run.units],
        variants_drawn={c: list(v.values()) for c, v in drawn.items()},
        failing=[
            {"provider": u.provider.name, "contract": u.contract.name, "failures": fails}
            for u in run.units
            if (fails := u.failures())
        ],
    )


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def write_reports(
    run: CertificationRun,
    report_dir: str | Path,
    comparison: Comparison | None = None,
    *,
    registry: CertificationRegistry | None = None,
    validity: dt.timedelta = DEFAULT_VALIDITY,
) -> dict[str, Path]:
    """Write the three report files into ``report_dir`` and return their paths.

    The failover decisions are ``registry``'s (the one the run recorded into), or, without
    it, those of this run's certificates alone (``reports.failover_table``).
    """
    failover = failover_rows(run, registry, validity=validity)
    out = Path(report_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out / "contracts.json",
        "html": out / "contracts.html",
        "junit": out / "contracts.junit.xml",
    }
    paths["json"].write_text(
        json.dumps(run_json(run, comparison) | {"failover": failover}, indent=2, ensure_ascii=False)
        + "\n",
        encoding="utf-8",
    )
    paths["html"].write_text(
        html_report(run, comparison, failover=failover, validity=validity), encoding="utf-8"
    )
    write_junit(paths["junit"], SUITE_NAME, junit_cases(run, comparison))
    return paths
