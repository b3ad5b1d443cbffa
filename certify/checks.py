"""The check layers, each a plain function over one case (DESIGN §6).

Layers, in the order a case goes through them::

    render      the template renders strictly; the system prompt sits where the protocol
                wants it; the prompt fits the context window (provider tokenizer offline,
                else a high estimate); special-token strings reach the model as plain text
    transport   the provider answered (a ``ProviderError`` other than BadOutput fails it)
    schema      the output is JSON and valid against the output JSON Schema
    model       the pydantic model accepts it (cross-field rules)
    semantics   the declared assertions and the Python hook hold for the case
    stability   every one of k repeats passed, with identical must-agree fields (pass^k)
    agreement   (pairs) primary and fallback agree on the must-agree fields

and three over a provider's whole run on a contract::

    variants    every variant drawn for this run (``contracts.relations``) passed the
                layers above, as the catalog's own cases must
    budget      p95 latency, output tokens and cost per case within the contract's budget
    production  (with ``--production N``) on recent production inputs, the fallback's
                answers pass the layers that need no expected value and agree with the
                primary's stored results, below the shadow checks' disagreement threshold
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2

from contracts.model import Case, Contract
from providers.base import ProviderRequest
from providers.config import ProviderConfig
from providers.registry import plugin_for
from providers.tokenizers import (
    HFTokenizer,
    TiktokenTokenizer,
    Tokenizer,
    encodes_special_tokens_as_text,
)

#: Literal special-token spellings of common model families; none may reach a prompt raw.
SPECIAL_TOKEN = re.compile(
    r"<\|[a-zA-Z0-9_]+\|>|</?s>|<(?:bos|eos|pad|unk|start_of_turn|end_of_turn)>"
)
EXCERPT_CHARS = 300  # characters of offending output kept in a failure


class Layer(enum.StrEnum):
    """One check layer; each is reported separately per case."""

    #: Template, system-prompt placement, token budget, special tokens.
    RENDER = "render"
    #: The provider answered at all.
    TRANSPORT = "transport"
    #: JSON, valid against the output JSON Schema.
    SCHEMA = "schema"
    #: Accepted by the contract's pydantic model.
    MODEL = "model"
    #: Declared assertions and the Python hook hold.
    SEMANTICS = "semantics"
    #: All k repeats passed, with identical must-agree fields.
    STABILITY = "stability"
    #: Primary and fallback agree on the must-agree fields (pairs only).
    AGREEMENT = "agreement"
    #: Every variant of the cases drawn for this run passed every case layer.
    VARIANTS = "variants"
    #: Latency, output tokens and cost per case within the contract's budget.
    BUDGET = "budget"
    #: On the inputs of recent production jobs, the fallback's answers pass the layers
    #: that need no expected value and agree with the primary's results (``--production``).
    PRODUCTION = "production"


#: The layers a single provider is certified on, in order.
CASE_LAYERS = (
    Layer.RENDER,
    Layer.TRANSPORT,
    Layer.SCHEMA,
    Layer.MODEL,
    Layer.SEMANTICS,
    Layer.STABILITY,
)
#: The layers judged over a provider's whole run on a contract, after the case layers.
UNIT_LAYERS = (Layer.VARIANTS, Layer.BUDGET, Layer.PRODUCTION)


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    """The outcome of one layer for one case."""

    layer: Layer
    passed: bool
    reason: str = ""  #: why it failed (empty when it passed)
    excerpt: str = ""  #: the offending output, shortened
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """Return a short printable excerpt of an output value."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def system_placement_errors(protocol: str, body: dict[str, Any], req: ProviderRequest) -> list[str]:
    """Return where the wire body puts the system prompt wrongly for ``protocol``."""
    try:
        plugin = plugin_for(protocol)
    except ValueError:
        return [f"unknown protocol {protocol!r}"]
    return plugin.placement_errors(body, req)


def check_render(
    contract: Contract,
    case: Case,
    config: ProviderConfig,
    tokenizer: Tokenizer,
    wire_body: dict[str, Any] | None,
    request: ProviderRequest | None,
) -> Check:
    """Check the render layer for one case (``wire_body``: what the adapter would send)."""
    problems: list[str] = []
    detail: dict[str, Any] = {"tokenizer": tokenizer.name, "exact": tokenizer.exact}
    input_errors = contract.validate_input(case.input)
    if input_errors:
        problems.append(f"input breaks the input schema: {input_errors[0]}")
    try:
        prompt = contract.render(case.input)
    except (jinja2.TemplateError, TypeError) as exc:
        return Check(Layer.RENDER, False, f"template does not render: {exc}", detail=detail)
    out_tokens = request.max_output_tokens if request else contract.max_output_tokens
    budget = config.context_window - out_tokens
    tokens = tokenizer.count(prompt.system) + tokenizer.count(prompt.user)
    detail.update(prompt_tokens=tokens, budget=budget, context_window=config.context_window)
    if tokens > budget:
        kind = "tokens" if tokenizer.exact else "tokens (estimated high)"
        problems.append(
            f"prompt is {tokens} {kind}, over the {budget}-token budget "
            f"({config.context_window} window minus output)"
        )
    answer_tokens = expected_answer_tokens(contract, case, tokenizer)
    if answer_tokens is not None:
        detail["answer_tokens"] = answer_tokens
        if answer_tokens > out_tokens:
            kind = "tokens" if tokenizer.exact else "tokens (estimated high)"
            problems.append(
                f"the expected answer is {answer_tokens} {kind}, over max_output_tokens "
                f"{out_tokens}: a faithful model would be cut off"
            )
    for name, text in (("system", prompt.system), ("user", prompt.user)):
        hit = SPECIAL_TOKEN.search(text)
        if hit:
            problems.append(f"special-token string {hit.group(0)!r} reaches the {name} prompt raw")
        elif literal := _tokenizer_special_strings(tokenizer, text):
            problems.append(
                f"the {name} prompt contains {literal[0]!r}, a special token of {tokenizer.name}"
            )
        elif not encodes_special_tokens_as_text(tokenizer, text):
            problems.append(f"the {name} prompt encodes to special-token ids")
    if wire_body is not None and request is not None:
        problems.extend(system_placement_errors(config.protocol, wire_body, request))
    if problems:
        return Check(Layer.RENDER, False, "; ".join(problems), detail=detail)
    return Check(Layer.RENDER, True, detail=detail)


def expected_answer_tokens(contract: Contract, case: Case, tokenizer: Tokenizer) -> int | None:
    """Count the case's expected answer (the contract's faithful answer, as JSON text)."""
    try:
        answer = contract.simulate(case.input)
    except Exception:  # no faithful answer for this input: nothing to count
        return None
    return tokenizer.count(json.dumps(answer, ensure_ascii=False))


def _tokenizer_special_strings(tokenizer: Tokenizer, text: str) -> list[str]:
    """Return the tokenizer's own special-token strings that occur literally in ``text``."""
    specials: set[str] = set()
    if isinstance(tokenizer, TiktokenTokenizer):
        specials = set(tokenizer.encoding.special_tokens_set)
    elif isinstance(tokenizer, HFTokenizer):
        decoder = tokenizer.tokenizer.get_added_tokens_decoder()
        specials = {tok.content for tok in decoder.values() if tok.special}
    return sorted(s for s in specials if s and s in text)


def check_schema(contract: Contract, output: Any) -> Check:
    """Check the output against the output JSON Schema."""
    errors = contract.schema_errors(output)
    if errors:
        return Check(Layer.SCHEMA, False, "; ".join(errors[:5]), excerpt(output))
    return Check(Layer.SCHEMA, True)


def check_model(contract: Contract, output: Any) -> Check:
    """Check the output against the contract's pydantic model."""
    errors = contract.model_errors(output)
    if errors:
        return Check(Layer.MODEL, False, "; ".join(errors[:5]), excerpt(output))
    return Check(Layer.MODEL, True)


def check_semantics(contract: Contract, case: Case, output: Any) -> Check:
    """Check the declared assertions and the hook against the case's expectations."""
    errors = contract.semantic_errors(case.input, output, case.expect)
    if errors:
        return Check(Layer.SEMANTICS, False, "; ".join(errors), excerpt(output))
    return Check(Layer.SEMANTICS, True)


def agreed_fields(contract: Contract, output: Any) -> dict[str, Any]:
    """Return the must-agree fields of an output."""
    if not isinstance(output, dict):
        return {}
    return {f: output.get(f) for f in contract.must_agree}


def check_stability(
    contract: Contract, repeat_passed: Sequence[bool], outputs: Sequence[Any]
) -> Check:
    """Pass when every repeat passed and the must-agree fields never changed (pass^k)."""
    k = len(repeat_passed)
    passed = sum(repeat_passed)
    detail = {"k": k, "passed": passed}
    if passed < k:
        return Check(
            Layer.STABILITY,
            False,
            f"pass^{k} failed: {passed} of {k} repeats passed",
            detail=detail,
        )
    first = agreed_fields(contract, outputs[0]) if outputs else {}
    for i, out in enumerate(outputs[1:], start=2):
        other = agreed_fields(contract, out)
        if other != first:
            diff = sorted(f for f in first if first.get(f) != other.get(f))
            return Check(
                Layer.STABILITY,
                False,
                f"repeat {i} changed must-agree field(s) {diff}",
                excerpt(out),
                detail,
            )
    return Check(Layer.STABILITY, True, detail=detail)


def check_agreement(contract: Contract, primary_output: Any, fallback_output: Any) -> Check:
    """Compare primary and fallback on the contract's must-agree fields."""
    if primary_output is None or fallback_output is None:
        return Check(Layer.AGREEMENT, False, "one side produced no valid output")
    a, b = agreed_fields(contract, primary_output), agreed_fields(contract, fallback_output)
    diff = [f for f in contract.must_agree if a.get(f) != b.get(f)]
    if diff:
        shown = ", ".join(f"{f}: {a.get(f)!r} vs {b.get(f)!r}" for f in diff)
        return Check(Layer.AGREEMENT, False, f"disagree on {shown}", excerpt(fallback_output))
    return Check(Layer.AGREEMENT, True)


def check_replays(provider_ids: Sequence[str | None], earlier: Mapping[str, str]) -> Check | None:
    """Fail stability when repeats share a provider id or reuse one of an earlier run.

    ``earlier`` maps the provider ids of earlier certificates to their run ids. A provider
    id names one piece of work: the same id twice is one answer served twice (a cache or a
    proxy replaying it), so the k repeats were not k samples.
    """
    k = len(provider_ids)
    seen: dict[str, int] = {}
    for i, pid in enumerate(provider_ids, start=1):
        if pid is None:
            continue
        if pid in earlier:
            return Check(
                Layer.STABILITY,
                False,
                f"replayed: repeat {i}/{k} came back with provider id {pid!r}, already "
                f"answered in run {earlier[pid]}; an earlier answer is not a new sample",
                detail={"replayed": True, "k": k},
            )
        if pid in seen:
            return Check(
                Layer.STABILITY,
                False,
                f"replayed: repeat {i}/{k} came back with the provider id {pid!r} of repeat "
                f"{seen[pid]}; the {k} repeats are {len(set(provider_ids))} sample(s), not {k}",
                detail={"replayed": True, "k": k},
            )
        seen[pid] = i
    return None
