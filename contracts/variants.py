"""Variants: cases drawn from the catalog's by its relations, new on every certification run.

``draw_variants`` draws a sample of variants of a contract's cases from a seed (a
certification run's id, unless one is given): every run asks inputs nobody has seen, and
the same seed draws the same variants again, so a failure can be replayed exactly. Each
variant is one or two relations (``contracts.relations``) applied to one case; a draw that
breaks the input schema, cannot render, or equals a catalog input is drawn again.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Sequence

from contracts.model import Case, Contract
from contracts.relations import JSON, Relation

MAX_CHAIN = 2  # relations applied to one case to make one variant
DRAW_ATTEMPTS = 12  # tries per variant before a slot is left empty


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class Variant(Case):
    """A case drawn from a catalog case by one or more relations; checked like the case."""

    origin: str = ""  #: the id of the catalog case it was drawn from
    relations: tuple[str, ...] = ()  #: the relations applied, in order
    seed: str = ""  #: the seed it was drawn with

    @property
    def variation(self) -> str:
        """Return the relations as one name: ``other-customer+signature``."""
        return "+".join(self.relations)


def draw_variants(contract: Contract, seed: str, count: int) -> tuple[Variant, ...]:
    """Draw ``count`` variants of the contract's cases, the same ones for the same seed."""
    relations = contract.relations
    if count <= 0 or not relations:
        return ()
    rng = random.Random(f"{seed}/{contract.name}")
    cases = [c for c in contract.cases if any(r.applies_to(c.tags) for r in relations)]
    if not cases:
        return ()
    order = rng.sample(cases, len(cases))
    known = [c.input for c in contract.cases]
    variants: list[Variant] = []
    for n in range(count):
        case = order[n % len(order)]
        for _ in range(DRAW_ATTEMPTS):
            drawn = _vary(case, relations, rng)
            if drawn is None:
                case = rng.choice(order)
                continue
            names, input, expect = drawn
            if input in known or contract.validate_input(input) or not _renders(contract, input):
                continue
            known.append(input)
            variants.append(
                Variant(
                    id=f"{case.id}~v{n + 1}",
                    input=input,
                    expect=expect,
                    note=f"{'+'.join(names)} of {case.id} (seed {seed})",
                    tags=case.tags,
                    origin=case.id,
                    relations=names,
                    seed=seed,
                )
            )
            break
    return tuple(variants)


def _vary(
    case: Case, relations: Sequence[Relation], rng: random.Random
) -> tuple[tuple[str, ...], JSON, JSON] | None:
    """Apply one or two relations (drawn at random) to a case."""
    wanted = 1 if rng.random() < 0.5 else MAX_CHAIN
    input, expect = copy.deepcopy(case.input), copy.deepcopy(case.expect)
    applied: list[str] = []
    for relation in rng.sample(list(relations), len(relations)):
        if len(applied) == wanted:
            break
        if not relation.applies_to(case.tags):
            continue
        out = relation.vary(copy.deepcopy(input), copy.deepcopy(expect), rng)
        if out is None:
            continue
        input, expect = out
        applied.append(relation.name)
    return (tuple(applied), input, expect) if applied else None


def _renders(contract: Contract, input: JSON) -> bool:
    try:
        contract.render(input)
    except Exception:  # a relation produced an input the template cannot take: skip it
        return False
    return True
