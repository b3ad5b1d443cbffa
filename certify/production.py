"""A fallback judged on production inputs before it is enabled (issue 48, ``--production N``).

The catalog's cases and their variants keep the catalog's subject matter; a provider that
answers whatever resembles the published suite well and anything else badly passes them.
The inputs of real succeeded jobs, and the results their primary wrote, are a better test
set. The command draws them (``cli.certify_production``, through the gateway's composition
root) and hands them here as plain data, a ``ProductionDraw`` per (contract, primary);
this module knows no database.

Each sample's input goes to the fallback once, with a certification key
(``certify/<run id>/<contract>/production/<n>``), never to the primary: its stored result
is the reference. The answer is judged as the shadow checks judge one (docs/certification.md):
the model it reports, the output schema and the pydantic model, the contract's invariants
(assertions that read no expected value; here with the language detector, which the
certification run loads anyway), then the must-agree fields against the primary's result.
A failed call is an error and is not counted; the calls keep to the provider's configured
limits and wait out its "not now" (``certify.pacing``). With ``min_samples`` judged, a disagreement
rate at or above ``threshold`` (the shadow checks' settings) fails the certificate; with
fewer judged, the sample is recorded and not judged. Only field names, value hashes and an
input hash are kept: never an input or an output.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from certify.checks import Check, Layer
from certify.estimated import call_usage
from certify.pacing import Pacer
from certify.usage import CallUsage
from contracts.model import Contract
from providers.base import BadOutput, ProviderError
from providers.config import ProviderConfig
from providers.model_identity import model_matches
from providers.tokenizers import Tokenizer

AGREED, DISAGREED, ERROR = "agreed", "disagreed", "error"
KEPT_DISAGREEMENTS = 20  #: disagreeing samples a certificate lists (names and hashes only)


def value_hash(value: Any) -> str:
    """Return a short hash of a JSON value, as the shadow checks keep one."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclasses.dataclass(frozen=True, slots=True)
class ProductionSample:
    """One succeeded job the primary answered: its input and the result it wrote."""

    job_id: str
    input: Any
    result: Any


@dataclasses.dataclass(frozen=True, slots=True)
class ProductionDraw:
    """The production sample of one contract and primary, for its fallbacks in the run."""

    contract: str
    primary: str
    fallbacks: tuple[str, ...]
    wanted: int  #: N of ``--production N``
    samples: tuple[ProductionSample, ...] = ()
    threshold: float = 0.2  #: ``[shadow] threshold``
    min_samples: int = 20  #: ``[shadow] min_samples``
    skipped: str | None = None  #: why no sample was drawn (not opted in, no database)


@dataclasses.dataclass(frozen=True, slots=True)
class ProductionCheck:
    """One production input answered by the fallback, judged (names and hashes only)."""

    outcome: str  #: ``agreed``, ``disagreed`` or ``error`` (no answer: not counted)
    input_sha256: str
    fields: tuple[str, ...] = ()  #: ``contract:<path>``, ``invariant:<id>``, must-agree names
    hashes: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    usage: CallUsage = dataclasses.field(default_factory=CallUsage)
    error: str | None = None


@dataclasses.dataclass(slots=True)
class ProductionResult:
    """A fallback's answers on one draw."""

    draw: ProductionDraw
    checks: list[ProductionCheck]

    @property
    def judged(self) -> int:
        """Return the samples answered and judged (errors are not counted)."""
        return sum(c.outcome != ERROR for c in self.checks)

    @property
    def disagreed(self) -> int:
        """Return the judged samples that disagreed."""
        return sum(c.outcome == DISAGREED for c in self.checks)

    @property
    def rate(self) -> float | None:
        """Return the disagreement rate over the judged samples (None: none judged)."""
        return self.disagreed / self.judged if self.judged else None

    def fields(self) -> dict[str, int]:
        """Count the disagreeing field names."""
        counts = collections.Counter(f for c in self.checks for f in c.fields)
        return dict(sorted(counts.items()))

    def sample_phrase(self) -> str:
        """Say ``production sample k/N of P's jobs`` (drawn of wanted)."""
        return _phrase(len(self.draw.samples), self.draw.wanted, self.draw.primary)

    def verdict(self) -> str:
        """Return ``skipped``, ``not judged``, ``passed`` or ``refused``."""
        if self.draw.skipped is not None:
            return "skipped"
        if self.judged < self.draw.min_samples:
            return "not judged"
        assert self.rate is not None
        return "refused" if self.rate >= self.draw.threshold else "passed"

    def check(self) -> Check:
        """Fail when the fallback disagreed too often on enough judged samples."""
        detail = self.as_dict()
        if self.verdict() != "refused":
            return Check(Layer.PRODUCTION, True, detail=detail)
        on = ", ".join(f"{name} ({n})" for name, n in self.fields().items())
        return Check(
            Layer.PRODUCTION,
            False,
            f"{self.sample_phrase()}: {self.judged} judged, {self.disagreed} disagreed "
            f"({self.rate:.0%} >= the threshold {self.draw.threshold:.0%} with "
            f"{self.draw.min_samples} judged), on {on}",
            detail=detail,
        )

    def line(self) -> str:
        """Say what the sample showed, in one line (the summary)."""
        return describe(self.as_dict())

    def as_dict(self) -> dict[str, Any]:
        """Return the record a certificate keeps: counts, field names, hashes; no values."""
        draw = self.draw
        return {
            "primary": draw.primary,
            "wanted": draw.wanted,
            "drawn": len(draw.samples),
            "calls": len(self.checks),
            "judged": self.judged,
            "disagreed": self.disagreed,
            "errors": sum(c.outcome == ERROR for c in self.checks),
            "disagreement_rate": None if self.rate is None else round(self.rate, 4),
            "threshold": draw.threshold,
            "min_samples": draw.min_samples,
            "verdict": self.verdict(),
            "fields": self.fields(),
            "disagreements": [
                {"input_sha256": c.input_sha256, "fields": list(c.fields), "hashes": c.hashes}
                for c in self.checks
                if c.outcome == DISAGREED
            ][:KEPT_DISAGREEMENTS],
            "skipped": draw.skipped,
        }


def _phrase(drawn: Any, wanted: Any, primary: Any) -> str:
    return f"production sample {drawn}/{wanted} of {primary}'s jobs"


def describe(record: Mapping[str, Any]) -> str:
    """Say in one line what a certificate's production record shows (the run's summary,
    ``can-i-failover``): drawn of wanted, judged, disagreed, on which fields, the verdict."""
    primary, verdict = record.get("primary"), record.get("verdict")
    if verdict == "skipped":
        return f"production sample of {primary}'s jobs: skipped ({record.get('skipped')})"
    head = _phrase(record.get("drawn"), record.get("wanted"), primary)
    counts = f"{record.get('judged')} judged, {record.get('disagreed')} disagreed"
    errors = record.get("errors") or 0
    extra = f", {errors} without an answer" if errors else ""
    if verdict == "not judged":
        return (
            f"{head}: {counts}{extra}; not judged (fewer than {record.get('min_samples')} "
            "judged): certified on the catalog and its variants alone"
        )
    rate = record.get("disagreement_rate") or 0.0
    fields = record.get("fields") or {}
    on = f", on {', '.join(fields)}" if fields else ""
    return (
        f"{head}: {counts} ({rate:.0%}{on}){extra}; {verdict} at "
        f"{record.get('threshold', 0):.0%} with {record.get('min_samples')} judged"
    )


def invariant_failures(contract: Contract, input: Any, output: Any) -> list[str]:
    """Name the contract's assertions that read no expected value and fail on ``output``."""
    return [
        f"invariant:{a.id}"
        for a in contract.assertions
        if a.expect is None and a.evaluate(input, output, {}) is not None
    ]


async def judge_sample(
    adapter: Any,
    provider: ProviderConfig,
    contract: Contract,
    sample: ProductionSample,
    key: str,
    tokenizer: Tokenizer | None = None,
    pacer: Pacer | None = None,
) -> ProductionCheck:
    """Send one production input to the fallback (in ``pacer``'s turn) and judge its answer."""
    input_sha = value_hash(sample.input)
    try:
        request = contract.provider_request(
            sample.input, model=provider.model, timeout=provider.timeout, idempotency_key=key
        )
    except Exception as exc:  # nothing was sent
        return ProductionCheck(ERROR, input_sha, error=f"render: {type(exc).__name__}")
    try:
        result = await (pacer.call(adapter, request) if pacer else adapter.call(request))
    except BadOutput:
        return ProductionCheck(DISAGREED, input_sha, ("contract:(not JSON)",))
    except ProviderError as exc:
        return ProductionCheck(ERROR, input_sha, error=f"{exc.outcome} failure ({exc.reason})")
    usage = call_usage(result, request, tokenizer, provider.model)
    identity = model_matches(
        provider.protocol, provider.model, result.model, provider.model_aliases
    )
    if not identity.matches:
        return ProductionCheck(DISAGREED, input_sha, ("transport:model",), usage=usage)
    output = result.output
    fields = list(
        dict.fromkeys(f"contract:{v.split(':', 1)[0]}" for v in contract.validate_output(output))
    )
    if not fields:
        fields += invariant_failures(contract, sample.input, output)
    primary = sample.result if isinstance(sample.result, dict) else {}
    answer = output if isinstance(output, dict) else {}
    hashes: dict[str, list[str]] = {}
    for name in contract.must_agree:
        if primary.get(name) != answer.get(name):
            fields.append(name)
            hashes[name] = [value_hash(primary.get(name)), value_hash(answer.get(name))]
    outcome = DISAGREED if fields else AGREED
    return ProductionCheck(outcome, input_sha, tuple(fields), hashes, usage)
