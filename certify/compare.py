"""Run-to-run comparison: which cases and variants changed verdict or must-agree values.

``onejob certify --compare PREVIOUS`` compares this run with a previous one: a report it
wrote (``contracts.json``), or ``last``, the registry's newest certificate of each provider
and contract before this run. Both become the same snapshot: per provider and contract the
verdict, the variants' seed, and per case and variant whether it passed, why not, and its
must-agree values. A case is listed when its verdict or values changed; variants are
listed one by one when both runs drew them with one seed (``--seed``), else as a count.
The comparison informs; it never changes a verdict or the exit code.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

LAST = "last"  #: ``--compare last``: the registry's newest certificates


class CompareError(Exception):
    """The previous run cannot be read."""


@dataclasses.dataclass(frozen=True, slots=True)
class Item:
    """One case or variant of a run, as far as a comparison needs it."""

    passed: bool
    agree: dict[str, Any] | None  #: the must-agree values (None: no valid answer)
    why: str = ""  #: the first failure, when it failed
    origin: str | None = None  #: for a variant, the case it was drawn from
    variation: str = ""  #: for a variant, its relations


@dataclasses.dataclass(frozen=True, slots=True)
class UnitSnapshot:
    """One provider on one contract in one run."""

    verdict: str
    run_id: str
    seed: str
    cases: dict[str, Item]
    variants: dict[str, Item]


Snapshot = dict[tuple[str, str], UnitSnapshot]


@dataclasses.dataclass(frozen=True, slots=True)
class Change:
    """A case, variant or unit whose verdict or must-agree values changed."""

    provider: str
    contract: str
    item: str  #: case id, variant id, ``(variants)`` or ``(unit)``
    kind: str  #: ``fails now``, ``passes now``, ``values changed``, ``variants``, ``verdict``
    detail: str
    regression: bool  #: worse than before (JUnit shows it as a failure)

    def line(self) -> str:
        """Return the change as one printed line."""
        return f"{self.provider} {self.contract} {self.item}: {self.kind}: {self.detail}"


@dataclasses.dataclass(frozen=True, slots=True)
class Comparison:
    """Every change between a previous run and this one."""

    source: str  #: what was compared with
    changes: tuple[Change, ...]
    units: int  #: units found in both runs

    def lines(self, limit: int = 40) -> list[str]:
        """Return the summary's lines (at most ``limit`` changes)."""
        head = f"changes since {self.source}: {len(self.changes)} over {self.units} unit(s)"
        shown = [f"  {c.line()}" for c in self.changes[:limit]]
        more = len(self.changes) - limit
        return [head, *shown, *([f"  ... and {more} more (see the reports)"] if more > 0 else [])]

    def as_dict(self) -> dict[str, Any]:
        """Return the comparison as JSON for the report."""
        return {
            "source": self.source,
            "units": self.units,
            "changes": [dataclasses.asdict(c) for c in self.changes],
        }


def _item(raw: Mapping[str, Any]) -> Item:
    return Item(
        passed=bool(raw.get("passed")),
        agree=raw.get("agree") if isinstance(raw.get("agree"), dict) else None,
        why=str(raw.get("why") or ""),
        origin=raw.get("variant_of"),
        variation="+".join(raw.get("relations") or ()),
    )


def snapshot_of_report(doc: Mapping[str, Any]) -> Snapshot:
    """Return the snapshot of a run from its ``contracts.json``."""
    out: Snapshot = {}
    for unit in doc.get("units") or ():
        out[(unit["provider"], unit["contract"])] = UnitSnapshot(
            verdict=str(unit.get("verdict")),
            run_id=str(doc.get("run_id") or ""),
            seed=str((unit.get("variants") or {}).get("seed") or ""),
            cases={c["case"]: _item(c) for c in unit.get("cases") or ()},
            variants={v["case"]: _item(v) for v in unit.get("variant_cases") or ()},
        )
    return out


def snapshot_of_certificates(entries: Iterable[Mapping[str, Any]]) -> Snapshot:
    """Return the snapshot of the newest certificate of each provider and contract."""
    newest: dict[tuple[str, str], Mapping[str, Any]] = {}
    for e in entries:
        key = (str(e.get("provider")), str(e.get("contract")))
        if key not in newest or str(e.get("certified_at")) > str(newest[key]["certified_at"]):
            newest[key] = e
    out: Snapshot = {}
    for key, e in newest.items():
        failed = {
            str(f.get("variant") or f.get("case")): f"{f.get('layer')}: {f.get('reason')}"
            for f in e.get("failures") or ()
        }

        def item(cid: str, ev: Mapping[str, Any], failed: Mapping[str, str] = failed) -> Item:
            return Item(
                passed=cid not in failed,
                agree=ev.get("agree") if isinstance(ev.get("agree"), dict) else None,
                why=failed.get(cid, ""),
                origin=ev.get("case") if isinstance(ev.get("case"), str) else None,
                variation="+".join(ev.get("relations") or ()),
            )

        out[key] = UnitSnapshot(
            verdict=str(e.get("verdict")),
            run_id=str(e.get("run_id") or ""),
            seed=str((e.get("variants") or {}).get("seed") or ""),
            cases={c: item(c, ev) for c, ev in (e.get("evidence") or {}).items()},
            variants={v: item(v, ev) for v, ev in (e.get("variant_evidence") or {}).items()},
        )
    return out


def load_previous(source: str, registry_entries: Iterable[Mapping[str, Any]]) -> Snapshot:
    """Read the previous run: a ``contracts.json`` path, or ``last`` for the registry."""
    if source == LAST:
        return snapshot_of_certificates(registry_entries)
    try:
        doc = json.loads(Path(source).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CompareError(f"--compare {source}: cannot read a previous report ({exc})") from exc
    if not isinstance(doc, dict) or not str(doc.get("format", "")).startswith(
        "onejob.contracts-report/"
    ):
        raise CompareError(f"--compare {source}: not a contracts.json written by onejob certify")
    return snapshot_of_report(doc)


def compare(previous: Snapshot, current: Snapshot, source: str) -> Comparison:
    """List what changed from ``previous`` to ``current``, unit by unit."""
    changes: list[Change] = []
    both = [key for key in current if key in previous]
    for key in both:
        before, now = previous[key], current[key]
        provider, contract = key
        if before.verdict != now.verdict:
            changes.append(
                Change(
                    provider,
                    contract,
                    "(unit)",
                    "verdict",
                    f"{before.verdict} -> {now.verdict}",
                    now.verdict != "pass",
                )
            )
        for cid, item in now.cases.items():
            if cid in before.cases:
                changes.extend(_diff(provider, contract, cid, before.cases[cid], item))
        if before.seed and before.seed == now.seed:
            for vid, item in now.variants.items():
                if vid in before.variants:
                    changes.extend(_diff(provider, contract, vid, before.variants[vid], item))
        elif before.variants or now.variants:
            changes.extend(_variant_counts(provider, contract, before, now))
    return Comparison(source, tuple(changes), len(both))


def _diff(provider: str, contract: str, item_id: str, before: Item, now: Item) -> list[Change]:
    what = f"variant of {now.origin} ({now.variation}); " if now.origin else ""
    if before.passed and not now.passed:
        return [Change(provider, contract, item_id, "fails now", f"{what}{now.why}", True)]
    if now.passed and not before.passed:
        return [Change(provider, contract, item_id, "passes now", f"{what}was {before.why}", False)]
    if before.agree is not None and now.agree is not None and before.agree != now.agree:
        moved = [
            f"{f}: {before.agree.get(f)!r} -> {now.agree.get(f)!r}"
            for f in sorted(set(before.agree) | set(now.agree))
            if before.agree.get(f) != now.agree.get(f)
        ]
        return [
            Change(provider, contract, item_id, "values changed", what + "; ".join(moved), True)
        ]
    return []


def _variant_counts(
    provider: str, contract: str, before: UnitSnapshot, now: UnitSnapshot
) -> list[Change]:
    """Compare variants drawn with different seeds by their counts (they are other inputs)."""
    passed_before = sum(v.passed for v in before.variants.values())
    passed_now = sum(v.passed for v in now.variants.values())
    failing_before = len(before.variants) - passed_before
    failing_now = len(now.variants) - passed_now
    if bool(failing_before) == bool(failing_now):
        return []
    failing = [vid for vid, v in now.variants.items() if not v.passed]
    was = (
        f"{passed_before}/{len(before.variants)} passed with seed {before.seed}"
        if before.variants
        else "none were run"
    )
    detail = (
        f"{was}; {passed_now}/{len(now.variants)} pass with seed {now.seed or '-'}"
        + (f"; failing now: {', '.join(failing[:5])}" if failing else "")
        + ("; give --seed to compare them one by one" if before.variants else "")
    )
    return [Change(provider, contract, "(variants)", "variants", detail, bool(failing_now))]
