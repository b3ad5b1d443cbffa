"""Metamorphic relations: how a contract's cases may vary, and what the answer then is.

A contract may ship ``variations.py`` with ``RELATIONS``, a tuple of ``Relation``. Each takes
one case (its input and expected values) and a random source, and returns a varied input
with the expected values of the variation: the same ones when the relation keeps the answer
(other names, a signature, lines reordered), recomputed when it changes the answer in a
known way (dates shifted, quantities multiplied: totals and due dates follow). A relation
returns None for a case it cannot vary safely; it must never produce an input whose right
answer differs from the expected values it returns. ``contracts.variants`` draws variants
from them; the helpers below (names, companies, identifiers, dates) are what the catalog's
relations share.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
import re
from collections.abc import Callable, Sequence
from typing import Any

JSON = dict[str, Any]
#: ``vary(input, expect, rng) -> (input, expect)`` or None when it does not apply.
VaryFunction = Callable[[JSON, JSON, random.Random], "tuple[JSON, JSON] | None"]
RELATION_NAME = re.compile(r"^[a-z][a-z0-9-]{1,40}$")


@dataclasses.dataclass(frozen=True, slots=True)
class Relation:
    """One declared way of varying a contract's cases."""

    name: str  #: ``other-customer``; names the variation in reports
    description: str  #: one sentence: what changes in the input, and in the answer
    vary: VaryFunction
    #: Expected fields the relation recomputes (empty: the expected answer is unchanged).
    changes: tuple[str, ...] = ()
    #: Case tags it leaves alone (``long``: it adds text to an input near the window).
    skip_tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not RELATION_NAME.match(self.name):
            raise ValueError(f"relation name {self.name!r} must match {RELATION_NAME.pattern}")

    @property
    def keeps_answer(self) -> bool:
        """Say whether the expected answer is the case's own."""
        return not self.changes

    def applies_to(self, tags: Sequence[str]) -> bool:
        """Say whether the relation may vary a case with these tags."""
        return not set(self.skip_tags) & set(tags)


#: Given and family names from many places; none is a word a classifier could key on.
GIVEN_NAMES = (
    "Amara", "Mateo", "Sofia", "Hiroshi", "Aisha", "Liam", "Chloé", "Lukas", "Ana", "Noah",
    "Fatou", "Ivan", "Mia", "Ravi", "Olga", "Tomás", "Emma", "Kwame", "Yara", "Lea", "Jonas",
    "Inès", "Dmitri", "Nadia", "Kenji", "Zanele", "Matteo", "Ingrid", "Farid", "Camila",
)  # fmt: skip
FAMILY_NAMES = (
    "Okonkwo", "García López", "Lindqvist", "Watanabe", "Rahman", "O'Connor", "Dubois",
    "Hoffmann", "Sousa", "Kim", "Diallo", "Petrov", "Jensen", "Iyer", "Nowicka", "Ruiz",
    "de Vries", "Mensah", "Haddad", "Bauer", "Virtanen", "Moreau", "Kowalski", "Nakamura",
    "Achterberg", "Szabó", "Quispe", "Ferreira", "Novák", "Castellano",
)  # fmt: skip
#: Company names without digits, currency codes or words an invoice reader keys on.
COMPANY_STEMS = (
    "Nordlicht Design", "Blue Harbor Supplies", "Kestrel Works", "Vega Components",
    "Orchard Lane Bakery", "Summit Field Services", "Lumen Textiles", "Fjord Analytics",
    "Redstone Tools", "Aurora Office Systems", "Silverbirch Interiors", "Pelican Print House",
    "Tidewater Logistics", "Morgenrot Software", "Cedar & Finch", "Helios Lighting",
)  # fmt: skip
JAPANESE_COMPANY_STEMS = ("ひかりデータ", "青空ソリューションズ", "みなとテック", "さくら物流")


def person(rng: random.Random, avoid: str = "") -> tuple[str, str]:
    """Return a (given, family) name different from ``avoid``'s given name."""
    while True:
        given, family = rng.choice(GIVEN_NAMES), rng.choice(FAMILY_NAMES)
        if given not in avoid:
            return given, family


def company(rng: random.Random, avoid: str = "") -> str:
    """Return a company name stem that ``avoid`` does not contain."""
    while True:
        stem = rng.choice(COMPANY_STEMS)
        if stem not in avoid:
            return stem


def reshape(identifier: str, rng: random.Random) -> str:
    """Return another identifier of the same shape: letters and separators kept, new digits."""
    if not any(ch.isdigit() for ch in identifier):
        return f"{identifier}-{rng.randrange(10, 100)}"
    while True:
        out = "".join(str(rng.randrange(10)) if ch.isdigit() else ch for ch in identifier)
        if out != identifier:
            return out


def replace_word(text: str, old: str, new: str) -> str:
    """Replace ``old`` as a whole word (not inside a longer word) in ``text``."""
    if not old:
        return text
    return re.sub(rf"(?<!\w){re.escape(old)}(?!\w)", lambda _: new, text)


def shift_iso(day: str, days: int) -> str:
    """Return an ISO date ``days`` later (earlier when negative)."""
    return (dt.date.fromisoformat(day) + dt.timedelta(days=days)).isoformat()
