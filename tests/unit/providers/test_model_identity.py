"""Which reported model is the configured one: snapshots and aliases per protocol."""

from __future__ import annotations

import pytest

from providers.model_identity import model_matches


@pytest.mark.parametrize(
    ("protocol", "configured", "reported", "rule"),
    [
        ("openai", "gpt-4o", "gpt-4o", "exact"),
        ("openai", "gpt-4o", "gpt-4o-2024-08-06", "snapshot"),
        ("anthropic", "claude-sonnet-4-5", "claude-sonnet-4-5-20250929", "snapshot"),
        ("anthropic", "claude-3-5-sonnet-latest", "claude-3-5-sonnet-20241022", "snapshot"),
        ("gemini", "gemini-2.0-flash", "gemini-2.0-flash-001", "snapshot"),
        ("gemini", "gemini-2.0-flash", "models/gemini-2.0-flash-001", "snapshot"),
        ("openai-compatible", "llama3", "llama3:latest", "snapshot"),
    ],
)
def test_the_configured_model_and_its_snapshots_match(
    protocol: str, configured: str, reported: str, rule: str
) -> None:
    identity = model_matches(protocol, configured, reported)
    assert (identity.matches, identity.rule) == (True, rule)


@pytest.mark.parametrize(
    ("protocol", "configured", "reported"),
    [
        ("openai", "gpt-4o", "gpt-4o-mini-2024-07-18"),  # same prefix, another family
        ("openai", "gpt-4o", "gpt-4o-mini"),
        ("openai", "gpt-4o", "gpt-4o-20240806"),  # Anthropic's snapshot shape on OpenAI
        ("openai", "gpt-4o-2024-08-06", "gpt-4o-2024-05-13"),  # a pinned snapshot is pinned
        ("anthropic", "claude-sonnet-4-5", "claude-haiku-4-5-20251001"),
        ("anthropic", "claude-sonnet-4", "claude-sonnet-4-5-20250929"),
        ("gemini", "gemini-2.0-flash", "gemini-2.0-flash-lite-001"),
        ("openai-compatible", "llama3", "llama3:8b-instruct-q2_K"),
    ],
)
def test_another_model_is_refused_with_both_names(
    protocol: str, configured: str, reported: str
) -> None:
    identity = model_matches(protocol, configured, reported)
    assert not identity.matches
    assert identity.reason == (
        f"model mismatch: configured {configured!r}, the provider reported {reported!r}, "
        "which is neither a snapshot nor a declared alias of it"
    )


def test_a_declared_alias_matches_and_only_for_its_provider() -> None:
    aliases = ("azure-gpt4o-deployment",)
    assert model_matches("openai", "gpt-4o", "azure-gpt4o-deployment", aliases).rule == "alias"
    assert not model_matches("openai", "gpt-4o", "azure-gpt4o-deployment").matches


@pytest.mark.parametrize("reported", [None, ""])
def test_an_answer_that_names_no_model_does_not_match(reported: str | None) -> None:
    identity = model_matches("anthropic", "claude-sonnet-4-5", reported)
    assert (identity.matches, identity.rule) == (False, "not reported")
    assert "did not say which model answered" in identity.reason
