"""Render a certification run: ``contracts.json``, ``contracts.html``, ``contracts.junit.xml``.

The HTML page is a provider x contract matrix a person reads at a glance (green: certified,
red: failed, with the first broken layer, and a caveat where stability rests on pass^k alone
because the model refused temperature), followed by every failure explained: the case, the
layer, the exact reason and an excerpt of the offending output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2

from certify.checks import CASE_LAYERS
from certify.results import CertificationRun, UnitResult
from reports.junit import JunitCase, write_junit

FORMAT = "onejob.contracts-report/1"
SUITE_NAME = "onejob.contracts"


def unit_json(unit: UnitResult) -> dict[str, Any]:
    """Return one provider x contract result as JSON."""
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
        "cases": [
            {
                "case": c.case,
                "passed": c.passed,
                "error": c.error,
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
            for c in unit.cases
        ],
        "agreement": {
            primary: [
                {"case": case.case, "passed": chk.passed, "reason": chk.reason}
                for case, chk in zip(unit.cases, checks, strict=True)
            ]
            for primary, checks in unit.agreement.items()
        },
    }


def run_json(run: CertificationRun) -> dict[str, Any]:
    """Return the whole run as JSON."""
    return {
        "format": FORMAT,
        "mode": run.mode.value,
        "certifies": run.mode.value != "replay",
        "repeats": run.repeats,
        "started_at": run.started_at.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "duration_s": round(run.duration, 3),
        "passed": run.passed,
        "errors": run.errors,
        "units": [unit_json(u) for u in run.units],
    }


def junit_cases(run: CertificationRun) -> list[JunitCase]:
    """Return one JUnit test case per provider x contract x case."""
    out: list[JunitCase] = []
    for unit in run.units:
        for c in unit.cases:
            first = c.first_failure()
            layers = "\n".join(
                f"{'ok  ' if c.checks[lyr].passed else 'FAIL'} {lyr.value} {c.checks[lyr].reason}"
                for lyr in CASE_LAYERS
            )
            out.append(
                JunitCase(
                    name=c.case,
                    classname=f"{SUITE_NAME}.{unit.provider.name}.{unit.contract.name}",
                    time=c.duration,
                    failure=f"{first.layer.value}: {first.reason}" if first else None,
                    failure_text=f"{layers}\n\noutput: {first.excerpt}" if first else "",
                    error=c.error,
                    system_out=layers,
                    failure_type="ContractViolation",
                )
            )
    return out


_HTML = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined).from_string(
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>onejob contract certification</title>
<style>
body{font-family:system-ui,sans-serif;margin:2rem;color:#222}
table{border-collapse:collapse;margin:1rem 0}
th,td{border:1px solid #ccc;padding:.4rem .6rem;text-align:left;vertical-align:top}
td.pass{background:#e3f6e5}td.fail{background:#fde4e1}
.small{font-size:.85em;color:#555}
pre{white-space:pre-wrap;background:#f6f6f6;padding:.4rem;margin:.2rem 0;max-width:70rem}
.banner{padding:.5rem 1rem;background:#fff4d6;border:1px solid #e0c36a}
.caveat{color:#7a5a00}
</style></head><body>
<h1>Contract certification</h1>
<p>Mode <b>{{ mode }}</b>, {{ repeats }} repeat(s) per case, started {{ started_at }},
took {{ '%.1f'|format(duration) }} s. Overall: <b>{{ 'PASS' if passed else 'FAIL' }}</b>.</p>
{% if mode == 'replay' %}<p class="banner">Replay mode proves adapters and parsers against
recorded cassettes; it never certifies a provider.</p>{% endif %}
{% if errors %}<h2>Harness errors</h2><ul>{% for e in errors %}<li><code>{{ e }}</code></li>
{% endfor %}</ul>{% endif %}
<h2>Provider &times; contract</h2>
<table><tr><th>provider</th>{% for c in contracts %}<th>{{ c }}</th>{% endfor %}</tr>
{% for p in providers %}<tr><th>{{ p }}</th>
{% for c in contracts %}{% set u = cells.get((p, c)) %}
{% if u is none %}<td>&ndash;</td>{% else %}
{% set ok = 'passed (replay)' if mode == 'replay' else 'certified' %}
<td class="{{ 'pass' if u.passed else 'fail' }}"><b>{{ ok if u.passed else 'FAILED' }}</b>
{% if not u.passed %}<br>{{ u.first }}{% endif %}
<div class="small">{% for k, v in u.rates.items() %}{{ k }} {{ '%d'|format(v * 100) }}%
{%- if not loop.last %}, {% endif %}{% endfor %}</div>
{% if u.note %}<div class="small caveat">{{ u.note }}</div>{% endif %}</td>{% endif %}
{% endfor %}</tr>
{% endfor %}</table>
<h2>Failures</h2>
{% for u in failing %}<h3>{{ u.provider }} on {{ u.contract }}</h3>
<table><tr><th>case</th><th>layer</th><th>reason</th><th>offending output</th></tr>
{% for f in u.failures %}<tr><td>{{ f.case }}</td><td>{{ f.layer }}</td><td>{{ f.reason }}</td>
<td><pre>{{ f.excerpt }}</pre></td></tr>{% endfor %}</table>
{% else %}<p>None.</p>{% endfor %}
</body></html>
"""
)


def html_report(run: CertificationRun) -> str:
    """Return the HTML matrix page."""
    providers = list(dict.fromkeys(u.provider.name for u in run.units))
    contracts = sorted({u.contract.name for u in run.units})
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    failing = []
    for u in run.units:
        fails = u.failures()
        layers = sorted({f["layer"] for f in fails})
        cells[(u.provider.name, u.contract.name)] = {
            "passed": u.passed,
            "rates": u.pass_rates(),
            "note": u.stability_note(),
            "first": (
                f"{len(fails)} of {len(u.cases)} case(s) fail at {', '.join(layers)}; "
                f"first: {fails[0]['case']}: {_clip(fails[0]['reason'], 160)}"
                if fails
                else "no case failed"
            ),
        }
        if fails:
            failing.append(
                {"provider": u.provider.name, "contract": u.contract.name, "failures": fails}
            )
    return _HTML.render(
        mode=run.mode.value,
        repeats=run.repeats,
        started_at=run.started_at.isoformat(timespec="seconds"),
        duration=run.duration,
        passed=run.passed,
        errors=run.errors,
        providers=providers,
        contracts=contracts,
        cells=cells,
        failing=failing,
    )


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def write_reports(run: CertificationRun, report_dir: str | Path) -> dict[str, Path]:
    """Write the three report files into ``report_dir`` and return their paths."""
    out = Path(report_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out / "contracts.json",
        "html": out / "contracts.html",
        "junit": out / "contracts.junit.xml",
    }
    paths["json"].write_text(
        json.dumps(run_json(run), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    paths["html"].write_text(html_report(run), encoding="utf-8")
    write_junit(paths["junit"], SUITE_NAME, junit_cases(run))
    return paths
