"""The render layer (placement, token budget, special tokens) and the other check layers."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import httpx
import pytest
import tokenizers
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from certify.checks import (
    Layer,
    check_agreement,
    check_render,
    check_stability,
    expected_answer_tokens,
    system_placement_errors,
)
from contracts.loader import load_catalog
from contracts.model import Case, Contract
from providers.config import ProviderConfig
from providers.factory import build_provider
from providers.tokenizers import EstimateTokenizer, HFTokenizer

CATALOG = load_catalog()
TRIAGE = CATALOG["ticket-triage@1"]


def config(protocol: str = "openai", **over: Any) -> ProviderConfig:
    return ProviderConfig(
        name="x",
        protocol=protocol,
        base_url="http://x/v1",
        model="m",
        **over,  # type: ignore[arg-type]
    )


def wire(
    cfg: ProviderConfig, case: Case, contract: Contract = TRIAGE
) -> tuple[dict[str, Any], Any]:
    adapter: Any = build_provider(cfg, httpx.AsyncClient())
    req = contract.provider_request(case.input, model="m", timeout=1.0, idempotency_key=None)
    return adapter.build(req)[2], req


@pytest.mark.parametrize("protocol", ["openai", "anthropic", "gemini", "openai-compatible"])
def test_every_adapter_places_the_system_prompt_where_its_api_wants_it(protocol: str) -> None:
    cfg = config(protocol)
    body, req = wire(cfg, TRIAGE.cases[0])
    check = check_render(TRIAGE, TRIAGE.cases[0], cfg, EstimateTokenizer(), body, req)
    assert check.passed, check.reason


@pytest.mark.parametrize(
    ("protocol", "body", "error"),
    [
        ("openai", {"messages": [{"role": "user", "content": "U"}]}, "first message"),
        (
            "openai",
            {"messages": [{"role": "system", "content": "S"}, {"role": "system", "content": "S"}]},
            "exactly one system message",
        ),
        ("anthropic", {"messages": [{"role": "user", "content": "S U"}]}, "top-level 'system'"),
        (
            "anthropic",
            {"system": "S", "messages": [{"role": "system", "content": "S"}]},
            "no system role",
        ),
        ("gemini", {"contents": [{"parts": [{"text": "S"}]}]}, "systemInstruction"),
    ],
)
def test_misplaced_system_prompt_is_a_render_failure(
    protocol: str, body: dict[str, Any], error: str
) -> None:
    req = TRIAGE.provider_request(TRIAGE.cases[0].input, model="m", timeout=1, idempotency_key=None)
    req = type(req)(**{**{f: getattr(req, f) for f in req.__slots__}, "system": "S", "user": "U"})
    errors = system_placement_errors(protocol, body, req)
    assert any(error in e for e in errors), errors


def test_prompt_over_the_context_window_fails_render_with_the_numbers() -> None:
    case = TRIAGE.case("long-log-paste")
    small = config(context_window=4096)
    check = check_render(TRIAGE, case, small, EstimateTokenizer(), None, None)
    assert not check.passed
    assert "over the 3796-token budget" in check.reason
    assert "estimated high" in check.reason
    roomy = config(context_window=16_384)
    assert check_render(TRIAGE, case, roomy, EstimateTokenizer(), None, None).passed


def test_an_expected_answer_over_max_output_tokens_fails_render() -> None:
    invoice = CATALOG["invoice-extraction@1"]
    case = invoice.case("wholesale-many-lines")
    cfg = config(context_window=128_000)
    body, req = wire(cfg, case, contract=invoice)
    assert check_render(invoice, case, cfg, EstimateTokenizer(), body, req).passed
    tight = dataclasses.replace(req, max_output_tokens=2000)  # the catalog's old limit
    check = check_render(invoice, case, cfg, EstimateTokenizer(), body, tight)
    assert not check.passed
    assert "the expected answer is 2544 tokens (estimated high), over max_output_tokens 2000" in (
        check.reason
    )
    assert check.detail["answer_tokens"] == 2544


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_every_catalog_answer_fits_its_output_budget_even_estimated_high(name: str) -> None:
    contract = CATALOG[name]
    for case in contract.cases:
        tokens = expected_answer_tokens(contract, case, EstimateTokenizer())
        assert tokens is not None and tokens <= contract.max_output_tokens, case.id


def tiny_tokenizer(tmp_path: Path) -> Path:
    vocab = {"[UNK]": 0, "<|endoftext|>": 1}
    tok = tokenizers.Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.add_special_tokens(["<|endoftext|>"])
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_special_token_strings_in_input_reach_the_tokenizer_as_plain_text(tmp_path: Path) -> None:
    tokenizer = HFTokenizer.from_file(tiny_tokenizer(tmp_path))
    case = TRIAGE.case("special-tokens-in-pasted-log")
    check = check_render(TRIAGE, case, config(), tokenizer, None, None)
    assert check.passed, check.reason
    assert check.detail["exact"] is True


def test_a_template_that_pastes_raw_input_fails_the_special_token_check(
    tmp_path: Path, triage_dir: Path
) -> None:
    from contracts.loader import load_contract

    (triage_dir / "user.j2").write_text("Ticket body: {{ body }}")
    raw = load_contract(triage_dir)
    case = raw.case("special-tokens-in-pasted-log")
    check = check_render(raw, case, config(), EstimateTokenizer(), None, None)
    assert not check.passed
    assert "special-token string '<|endoftext|>' reaches the user prompt raw" in check.reason


def test_stability_needs_every_repeat_and_identical_must_agree_fields() -> None:
    out = TRIAGE.simulate(TRIAGE.cases[0].input)
    assert check_stability(TRIAGE, [True, True, True], [out, out, out]).passed
    flaky = check_stability(TRIAGE, [True, False, True], [out, None, out])
    assert (flaky.passed, flaky.reason) == (False, "pass^3 failed: 2 of 3 repeats passed")
    drift = check_stability(TRIAGE, [True, True], [out, {**out, "priority": "low"}])
    assert not drift.passed and "['priority']" in drift.reason
    same_meaning = {**out, "summary": "different words"}
    assert check_stability(TRIAGE, [True, True], [out, same_meaning]).passed


def test_agreement_compares_only_must_agree_fields() -> None:
    out = TRIAGE.simulate(TRIAGE.cases[0].input)
    assert check_agreement(TRIAGE, out, {**out, "summary": "other words"}).passed
    broken = check_agreement(TRIAGE, out, {**out, "category": "other"})
    assert broken.layer is Layer.AGREEMENT and not broken.passed
    assert "category: 'billing' vs 'other'" in broken.reason
    assert not check_agreement(TRIAGE, out, None).passed


def test_a_tokenizer_special_token_in_a_prompt_fails_even_without_the_common_spelling(
    tmp_path: Path, triage_dir: Path
) -> None:
    from contracts.loader import load_contract

    vocab = {"[UNK]": 0, "[SEP]": 1}
    tok = tokenizers.Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.add_special_tokens(["[SEP]"])
    path = tmp_path / "sep.json"
    tok.save(str(path))
    (triage_dir / "user.j2").write_text("Ticket {{ ticket_id }} [SEP] {{ subject }}")
    raw = load_contract(triage_dir)
    check = check_render(raw, raw.cases[0], config(), HFTokenizer.from_file(path), None, None)
    assert not check.passed
    assert "contains '[SEP]', a special token of hf:sep.json" in check.reason
