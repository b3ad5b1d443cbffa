"""A contract or provider nobody configured is named plainly, with the known ones, and
no message is wrapped in Python's quotes (a KeyError's str() quoted the whole sentence)."""

from __future__ import annotations

import pytest

from cli.main import main

EXIT_ERROR = 2
CONTRACTS = "invoice-extraction@1, reply-draft@1, ticket-triage@1"
PROVIDERS = "sim-anthropic, sim-openai"


@pytest.fixture(autouse=True)
def built_in_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ONEJOB_CONFIG", raising=False)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["certify", "--contract", "nope@1"],
            f"error: unknown contract nope@1 (the catalog has {CONTRACTS})",
        ),
        (
            ["certify", "--provider", "nope", "--provider", "other"],
            f"error: unknown provider nope, other (configured: {PROVIDERS})",
        ),
    ],
    ids=["contract", "providers"],
)
def test_certify_names_what_is_unknown_without_quotes(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    assert main(argv) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == said
    assert '"' not in err and "['" not in err


@pytest.mark.parametrize(
    ("contract", "primary", "fallback", "said"),
    [
        ("ticket-triage@1", "a", "b", f"error: unknown provider a, b (configured: {PROVIDERS})"),
        (
            "x@1",
            "sim-openai",
            "nope",
            f"error: unknown contract x@1 (the catalog has {CONTRACTS}); "
            f"unknown provider nope (configured: {PROVIDERS})",
        ),
    ],
    ids=["providers", "contract and provider"],
)
def test_can_i_failover_names_each_unknown_name(
    capsys: pytest.CaptureFixture[str], contract: str, primary: str, fallback: str, said: str
) -> None:
    argv = ["can-i-failover", "--contract", contract, "--from", primary, "--to", fallback]
    assert main(argv) == EXIT_ERROR
    assert capsys.readouterr().out.strip() == said
