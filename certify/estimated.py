"""Token counts for a call whose provider reported none: counted here, marked estimated.

Several OpenAI-compatible servers and proxies answer without a ``usage`` object. A budget
must refuse what is over it, not what it cannot see, so such a call's tokens are counted
with the offline tokenizer the render check already uses for the provider
(``providers.tokenizers.tokenizer_for``): the output from the text the model wrote, the
input from the rendered system and user messages (the wire's few framing tokens per
message are not counted). The figures are then marked estimated, with the tokenizer's name
and its margin, wherever they are shown.

The margins were measured on this catalog (every case's rendered prompt and faithful
answer; ``tests/unit/certify/test_estimated_tokens.py`` measures them again): the 3-bytes
estimate counts 14 % fewer to 47 % more tokens than OpenAI's ``o200k_base`` and
``cl100k_base``, and those two differ from each other by up to 16 %, which is how far an
exact tokenizer may be from a model that uses another one.
"""

from __future__ import annotations

from typing import Any

import tiktoken

from certify.usage import CallUsage
from providers.base import ProviderRequest
from providers.tokenizers import EstimateTokenizer, Tokenizer

#: The byte estimate against OpenAI's encodings on the catalog: (fewest, most), relative.
ESTIMATE_MARGIN = (-0.14, 0.47)
#: How far two real BPE encodings (o200k_base, cl100k_base) differ on the catalog.
MISMATCH_MARGIN = 0.16


def margin(tokenizer: Tokenizer, model: str) -> str:
    """Say how far ``tokenizer``'s counts may be from what ``model`` itself counts."""
    if isinstance(tokenizer, EstimateTokenizer):
        low, high = ESTIMATE_MARGIN
        return (
            f"{-low:.0%} fewer to {high:.0%} more tokens than OpenAI's o200k_base and "
            "cl100k_base on the catalog; a model with its own tokenizer may differ more"
        )
    own = _encoding_of(model)
    if own is not None and tokenizer.name == f"tiktoken:{own}":
        return f"exact: {own} is {model}'s own encoding"
    return (
        f"exact if it is {model}'s own tokenizer; a mismatched model's count may differ by "
        f"up to {MISMATCH_MARGIN:.0%} (o200k_base and cl100k_base differ that much on the "
        "catalog)"
    )


def _encoding_of(model: str) -> str | None:
    try:
        return tiktoken.encoding_name_for_model(model)
    except KeyError:
        return None


def call_usage(
    result: Any, request: ProviderRequest, tokenizer: Tokenizer | None, model: str
) -> CallUsage:
    """Return a call's usage as reported, or counted with ``tokenizer`` where it was not."""
    reported_in, reported_out = result.usage.input_tokens, result.usage.output_tokens
    if tokenizer is None or (reported_in is not None and reported_out is not None):
        return CallUsage(result.latency, reported_in, reported_out)
    input_tokens = reported_in
    if input_tokens is None:
        input_tokens = tokenizer.count(request.system) + tokenizer.count(request.user)
    output_tokens = reported_out
    if output_tokens is None:
        output_tokens = tokenizer.count(result.raw_text or "")
    return CallUsage(
        result.latency,
        input_tokens,
        output_tokens,
        counted_by=tokenizer.name,
        margin=margin(tokenizer, model),
    )
