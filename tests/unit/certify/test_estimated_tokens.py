"""The margins ``certify.estimated`` states, measured again on the catalog, and the counting."""

from __future__ import annotations

import json

from certify.estimated import ESTIMATE_MARGIN, MISMATCH_MARGIN, call_usage, margin
from contracts.loader import load_catalog
from providers.base import ProviderRequest, ProviderResult, Usage
from providers.tokenizers import EstimateTokenizer, bundled_public_encoding


def catalog_texts() -> list[str]:
    """Every case's rendered prompt and faithful answer."""
    texts = []
    for contract in load_catalog().values():
        for case in contract.cases:
            prompt = contract.render(case.input)
            texts.append(prompt.system + prompt.user)
            texts.append(json.dumps(contract.simulate(case.input), ensure_ascii=False))
    return texts


def test_the_stated_margins_hold_on_the_catalog() -> None:
    o200k, cl100k = bundled_public_encoding("o200k_base"), bundled_public_encoding("cl100k_base")
    assert o200k is not None and cl100k is not None
    estimate = EstimateTokenizer()
    ratios, apart = [], []
    for text in catalog_texts():
        counts = o200k.count(text), cl100k.count(text)
        ratios += [estimate.count(text) / n - 1 for n in counts]
        apart.append(max(counts) / min(counts) - 1)
    low, high = ESTIMATE_MARGIN
    assert low <= min(ratios) and max(ratios) <= high
    assert max(apart) <= MISMATCH_MARGIN


def result(text: str, usage: Usage) -> ProviderResult:
    return ProviderResult({}, text, "r1", usage, "stop", 0.25)


def test_reported_tokens_are_kept_and_missing_ones_counted() -> None:
    request = ProviderRequest(
        system="abc", user="defghi", output_schema={}, schema_name="s", model="m"
    )
    tokenizer = EstimateTokenizer()
    kept = call_usage(result("x" * 30, Usage(7, 9)), request, tokenizer, "m")
    assert (kept.input_tokens, kept.output_tokens, kept.counted_by) == (7, 9, None)
    counted = call_usage(result("x" * 30, Usage()), request, tokenizer, "m")
    assert (counted.input_tokens, counted.output_tokens) == (1 + 2, 10)
    assert counted.counted_by == tokenizer.name and counted.margin == margin(tokenizer, "m")
    half = call_usage(result("x" * 30, Usage(input_tokens=40)), request, tokenizer, "m")
    assert (half.input_tokens, half.output_tokens) == (40, 10) and half.counted_by


def test_an_exact_tokenizer_says_whether_it_is_the_models_own() -> None:
    o200k = bundled_public_encoding("o200k_base")
    assert o200k is not None
    assert margin(o200k, "gpt-4o") == "exact: o200k_base is gpt-4o's own encoding"
    assert "differ by up to 16%" in margin(o200k, "llama3")
