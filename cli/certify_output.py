"""What ``onejob certify`` prints: the progress line per unit, the provider x contract
table; and which providers have cassettes to replay."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from certify.results import CertificationRun, Progress

REASON_CHARS = 160  # characters of a unit's first failure shown on its progress line


def progress_printer(out: TextIO, total_units: int, total_cases: int) -> Callable[[Progress], None]:
    """A line per certified unit (and a live case counter on a terminal) on ``out``."""
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
        if len(why) > REASON_CHARS:
            why = why[: REASON_CHARS - 3] + "..."
        if note := unit.stability_note():
            why += f"\n    note: {note}"
        variants = f", {sum(v.passed for v in unit.variants)}/{len(unit.variants)} variants"
        print(
            f"{chr(13) if live else ''}[{finished}/{total_units}] {unit.provider.name:<16} "
            f"{unit.contract.name:<22} {verdict}  "
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
