"""What ``onejob certify`` prints: the progress line per unit, the provider x contract
table; which providers have cassettes to replay; and what ``can-i-failover`` adds from the
certificates (the pair's usage, the fallback's production sample)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from certify.results import CertificationRun, Progress
    from contracts.model import Contract

REASON_CHARS = 160  # characters of a unit's first failure shown on its progress line


def progress_printer(
    out: TextIO, total_units: int, total_cases: int, widths: tuple[int, int] = (16, 22)
) -> Callable[[Progress], None]:
    """A line per certified unit (and a live case counter on a terminal) on ``out``;
    ``widths``: the longest provider and contract names, so the columns line up."""
    from reports.lines import clipped

    provider_width, contract_width = widths
    finished = 0
    cases_done = 0
    live = out.isatty()

    def show(event: Progress) -> None:
        nonlocal finished, cases_done
        if event.unit is None:
            cases_done += 1
            if live:  # a live counter on a terminal; logs get one line per unit only
                print(f"\r  {cases_done}/{total_cases} cases", end="", file=out, flush=True)
            return
        finished += 1
        unit = event.unit
        verdict = "PASS" if unit.passed else "FAIL"
        fails = unit.failures()
        why = (
            f"  first failure: {fails[0]['case']} at {fails[0]['layer']}: {fails[0]['reason']}"
            if fails
            else ""
        )
        why = clipped(why, REASON_CHARS)
        if note := unit.stability_note():
            why += f"\n    note: {note}"
        variants = f", {sum(v.passed for v in unit.variants)}/{len(unit.variants)} variants"
        print(
            f"{chr(13) if live else ''}[{finished:>{len(str(total_units))}}/{total_units}] "
            f"{unit.provider.name:<{provider_width}} {unit.contract.name:<{contract_width}} "
            f"{verdict}  "
            f"{sum(c.passed for c in unit.cases)}/{len(unit.cases)} cases"
            f"{variants if unit.variants else ''}; {unit.usage_summary().brief()}{why}",
            file=out,
            flush=True,
        )

    return show


def recorded_providers(root: Path) -> set[str]:
    """The providers with a cassette folder under ``root``."""
    return {p.name for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()


def summary_table(run: CertificationRun) -> str:
    """Return a plain-text provider x contract table of verdicts."""
    providers = list(dict.fromkeys(u.provider.name for u in run.units))
    contracts = sorted({u.contract.name for u in run.units})
    cells = {(u.provider.name, u.contract.name): u for u in run.units}
    width = max([len(p) for p in providers] + [8])
    cols = [max(len(c), 6) for c in contracts]
    lines = [
        " " * width + "  " + "  ".join(c.ljust(w) for c, w in zip(contracts, cols, strict=True))
    ]
    for p in providers:
        row = []
        for c, w in zip(contracts, cols, strict=True):
            u = cells.get((p, c))
            row.append(("-" if u is None else "PASS" if u.passed else "FAIL").ljust(w))
        lines.append(p.ljust(width) + "  " + "  ".join(row))
    return "\n".join(lines)


def usage_line(contract: Contract, registry: Any, primary: str, fallback: str) -> str | None:
    """Say the certificates' latency and cost against the budget (None: none recorded)."""
    from certify.usage import brief_figures
    from contracts.budget import usage_figures

    def brief(figures: Mapping[str, Any] | None) -> str:
        if figures is None:
            return "not recorded"
        return brief_figures(
            figures.get("latency_p95_ms"),
            figures.get("output_tokens_per_case"),
            figures.get("cost_per_case_usd"),
            estimated=(
                {"tokenizer": figures["tokens_estimated"]}
                if figures.get("tokens_estimated")
                else None
            ),
        )

    def figures_of(provider: str) -> dict[str, Any] | None:
        entry = registry.latest_certificate(contract.name, provider) or {}
        return usage_figures(entry.get("usage"))

    mine, theirs = figures_of(fallback), figures_of(primary)
    if mine is None and theirs is None:
        return None
    over = contract.budget.over(mine)
    return (
        f"usage: fallback {fallback} {brief(mine) or 'no figure'}; "
        f"primary {primary} {brief(theirs) or 'no figure'}"
        f"; budget {brief(contract.budget.as_dict()) or 'none declared'}"
        + (f"; {fallback} over budget on {', '.join(over)}" if over else "")
    )


def failover_lines(contract: Contract, registry: Any, primary: str, fallback: str) -> list[str]:
    """Say what can-i-failover adds to its verdict from the certificates: what the pair
    costs, and what the fallback's production sample showed (issue 48)."""
    from certify.production import describe

    lines = [line] if (line := usage_line(contract, registry, primary, fallback)) else []
    cert = registry.latest_certificate(contract.name, fallback) or {}
    records = cert.get("production")
    mine = [
        r
        for r in (records if isinstance(records, list) else [])
        if isinstance(r, dict) and r.get("primary") == primary
    ]
    lines += [describe(r) for r in mine]
    if not mine and contract.hedgeable:
        lines.append(
            f"production sample: none in {fallback}'s certificate (certify --production N)"
        )
    return lines
