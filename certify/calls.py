"""One call of one case and the layers it is checked on: transport, schema, model, semantics.

A repeat of a case is one call. ``one_call`` makes it and checks what came back layer by
layer (a layer after a failure is "not reached"); ``aggregate`` folds the k repeats of a
layer into the case's verdict for it. ``CallFacts`` is what the call said about itself:
the provider's id, the model, what was left out, and its latency and token usage.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from certify.cassettes import CassetteMismatch
from certify.checks import Check, Layer, check_model, check_schema, check_semantics, excerpt
from certify.estimated import call_usage
from certify.usage import CallUsage
from contracts.model import Case, Contract
from providers.base import BadOutput, ProviderError, ProviderRequest
from providers.config import ProviderConfig
from providers.model_identity import model_matches
from providers.tokenizers import Tokenizer


@dataclasses.dataclass(frozen=True, slots=True)
class CallFacts:
    """What one call said about itself: the provider's id, the model, what was left out."""

    provider_id: str | None = None
    model: str | None = None
    omitted_parameters: tuple[str, ...] = ()
    usage: CallUsage = dataclasses.field(default_factory=CallUsage)


def not_reached(layer: Layer, because: Layer) -> Check:
    """Return the check of a layer never reached because an earlier one failed."""
    return Check(layer, False, f"not reached: {because.value} failed", detail={"not_reached": True})


async def one_call(
    adapter: Any,
    provider: ProviderConfig,
    contract: Contract,
    case: Case,
    request: ProviderRequest,
    tokenizer: Tokenizer | None = None,
) -> tuple[dict[Layer, Check], Any, str | None, CallFacts]:
    """Make one call and check its layers: transport, schema, model, semantics; count the
    tokens with ``tokenizer`` when the provider reported none (``certify.estimated``)."""
    layers: dict[Layer, Check] = {}
    try:
        result = await adapter.call(request)
    except CassetteMismatch as exc:
        layers[Layer.TRANSPORT] = Check(Layer.TRANSPORT, False, f"cassette mismatch: {exc}")
        fill_not_reached(layers, Layer.TRANSPORT)
        return layers, None, str(exc), CallFacts()
    except BadOutput as exc:
        layers[Layer.TRANSPORT] = Check(Layer.TRANSPORT, True)
        layers[Layer.SCHEMA] = Check(
            Layer.SCHEMA,
            False,
            f"output is not the contract's JSON ({exc.reason}): {exc}",
            exc.body_excerpt or "",
        )
        fill_not_reached(layers, Layer.SCHEMA)
        return layers, None, None, CallFacts(exc.request_id)
    except ProviderError as exc:
        layers[Layer.TRANSPORT] = Check(
            Layer.TRANSPORT,
            False,
            f"{exc.outcome} failure ({exc.reason}): {exc}",
            exc.body_excerpt or "",
        )
        fill_not_reached(layers, Layer.TRANSPORT)
        return layers, None, None, CallFacts(exc.request_id)
    usage = call_usage(result, request, tokenizer, provider.model)
    facts = CallFacts(result.request_id, result.model, result.omitted_parameters, usage)
    output = result.output
    identity = model_matches(
        provider.protocol, provider.model, result.model, provider.model_aliases
    )
    if not identity.matches:
        layers[Layer.TRANSPORT] = Check(Layer.TRANSPORT, False, identity.reason, excerpt(output))
        fill_not_reached(layers, Layer.TRANSPORT)
        return layers, output, None, facts
    layers[Layer.TRANSPORT] = Check(Layer.TRANSPORT, True)
    layers[Layer.SCHEMA] = check_schema(contract, output)
    if not layers[Layer.SCHEMA].passed:
        fill_not_reached(layers, Layer.SCHEMA)
        return layers, output, None, facts
    layers[Layer.MODEL] = check_model(contract, output)
    if not layers[Layer.MODEL].passed:
        fill_not_reached(layers, Layer.MODEL)
        return layers, output, None, facts
    layers[Layer.SEMANTICS] = check_semantics(contract, case, output)
    return layers, output, None, facts


CALL_LAYERS = (Layer.TRANSPORT, Layer.SCHEMA, Layer.MODEL, Layer.SEMANTICS)


def fill_not_reached(layers: dict[Layer, Check], failed: Layer) -> None:
    """Mark the call layers after ``failed`` as not reached."""
    for layer in CALL_LAYERS[CALL_LAYERS.index(failed) + 1 :]:
        layers[layer] = not_reached(layer, failed)


def aggregate(layer: Layer, per_repeat: list[dict[Layer, Check]]) -> Check:
    """Fail a layer when it failed in any repeat; pass it when it passed wherever reached."""
    if not per_repeat:
        return not_reached(layer, Layer.RENDER)
    checks = [rep[layer] for rep in per_repeat]
    real = [(i, c) for i, c in enumerate(checks, start=1) if not c.detail.get("not_reached")]
    if not real:
        return checks[0]  # never reached in any repeat
    failing = [(i, c) for i, c in real if not c.passed]
    if not failing:
        return real[0][1]
    i, check = failing[0]
    k = len(per_repeat)
    if k > 1 and len(failing) < k:
        return dataclasses.replace(check, reason=f"repeat {i}/{k}: {check.reason}")
    return check
