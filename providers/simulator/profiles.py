"""How a simulated provider answers: the contract input block, the catalog, and profiles.

The rendered user message of every contract ends with
``<input contract="NAME@V">\\n{json}\\n</input>``; the simulator takes the LAST such block,
asks the catalog's contract for its deterministic answer, and lets the provider's profile
bend it (wrap it, get it wrong, or talk around it).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from typing import Any, Protocol

from providers.sim_wire import Reply

_INPUT_OPEN = re.compile(r'<input contract="([^"<>]+)">')
_INPUT_CLOSE = "</input>"


class Profile(enum.StrEnum):
    """How a simulated provider behaves when nothing is scripted."""

    FAITHFUL = "faithful"  #: the contract's correct answer, exactly as the format asks
    DRIFTING = "drifting"  #: the correct answer wrapped under an extra top-level key
    SLOPPY = "sloppy"  #: schema-valid but semantically wrong (wrong category, bad totals)
    NO_SYSTEM = "no-system"  #: ignores the format instructions: prose around the JSON
    #: the correct values, but free text in the wrong language (the input's, not the asked one)
    WRONG_LANGUAGE = "wrong-language"
    #: the correct answer from another model: reports ``<requested model>-mini``
    OTHER_MODEL = "other-model"
    #: a caching proxy: an identical request body gets the first answer again, byte for byte
    REPLAYING = "replaying"
    #: a model tuned on the published catalog: right on the catalog's own inputs, and on any
    #: other input wrong on a must-agree field (the contract's ``simulate_memorised``)
    CATALOG_ONLY = "catalog-only"
    #: a semantic cache warmed with the catalog in front of a weaker model: right on inputs
    #: that resemble a catalog case (so on the variants that keep its answer), and on any
    #: other input wrong on a must-agree field (the contract's ``simulate_suite_cache``)
    SUITE_CACHE = "suite-cache"
    #: the faithful answer in an envelope without token usage (OpenAI wire: no ``usage``
    #: object), as several OpenAI-compatible servers and proxies answer
    NO_USAGE = "no-usage"


#: What ``other-model`` appends to the requested model name in its answers.
OTHER_MODEL_SUFFIX = "-mini"


#: The key ``drifting`` wraps valid output under.
DRIFT_KEY = "result"


class SimContract(Protocol):
    """What the simulator needs from a catalog contract."""

    def simulate(self, input: Any) -> Any:
        """Return the faithful answer for ``input``."""
        ...

    def simulate_sloppy(self, input: Any) -> Any:
        """Return a schema-valid but semantically wrong answer for ``input``."""
        ...

    def simulate_wrong_language(self, input: Any) -> Any:
        """Return the faithful answer with its free text in the wrong language."""
        ...


class InputBlockError(ValueError):
    """The user message carries no readable contract input block."""


def extract_input(user: str) -> tuple[str, Any]:
    """Return ``(contract, input)`` from the last ``<input contract=...>`` block of ``user``."""
    opens = list(_INPUT_OPEN.finditer(user))
    if not opens:
        raise InputBlockError('no <input contract="NAME@V"> block in the user message')
    last = opens[-1]
    end = user.rfind(_INPUT_CLOSE, last.end())
    if end < 0:
        raise InputBlockError("the last <input> block is not closed")
    raw = user[last.end() : end].strip()
    try:
        return last.group(1), json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputBlockError(f"the <input> block is not JSON: {exc.msg}") from exc


def find_contract(catalog: Any, name: str) -> SimContract | None:
    """Look ``name`` (``NAME@V``) up in a catalog mapping or an object with ``get``."""
    try:
        if isinstance(catalog, Mapping):
            found = catalog.get(name)
        else:
            getter = getattr(catalog, "get", None)
            found = getter(name) if callable(getter) else None
    except (KeyError, LookupError, ValueError):
        return None
    if found is None or not hasattr(found, "simulate"):
        return None
    return found  # type: ignore[no-any-return]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def answer(contract_name: str, contract: SimContract, input: Any, profile: Profile) -> Reply:
    """Return what a model with ``profile`` writes for ``input``."""
    if profile is Profile.SLOPPY:
        value = contract.simulate_sloppy(input)
    elif profile is Profile.WRONG_LANGUAGE:
        value = contract.simulate_wrong_language(input)
    elif profile is Profile.CATALOG_ONLY:
        # A catalog without the notion (your own test doubles) answers faithfully.
        memorised = getattr(contract, "simulate_memorised", contract.simulate)
        value = memorised(input)
    elif profile is Profile.SUITE_CACHE:
        cached = getattr(contract, "simulate_suite_cache", contract.simulate)
        value = cached(input)
    else:
        value = contract.simulate(input)
    if profile is Profile.DRIFTING:
        value = {DRIFT_KEY: value}
    if profile is Profile.NO_SYSTEM:
        prose = (
            f"Sure! Here is the {contract_name} result you asked for:\n\n"
            f"```json\n{_dumps(value)}\n```\n\nLet me know if you need anything else."
        )
        return Reply(text=prose)
    usage = profile is not Profile.NO_USAGE
    return Reply(text=_dumps(value), value=value, structured=True, usage=usage)


def malformed(contract: SimContract, input: Any) -> Reply:
    """Return broken JSON: the faithful answer cut off before its closing brace."""
    text = _dumps(contract.simulate(input))
    return Reply(text=text[: max(1, len(text) - 1)].rstrip() + ",")
