"""Python checks for reply-draft@1 that declarations cannot say."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Output(BaseModel):
    """The drafted reply, typed."""

    model_config = ConfigDict(extra="forbid", strict=True)

    subject: str = Field(min_length=1, max_length=100)
    body: str = Field(min_length=20, max_length=2000)
    language: Literal["en", "de", "es", "fr"]
    next_step: Literal[
        "replacement_sent", "refund_issued", "return_label_sent", "investigating", "none"
    ]

    @field_validator("subject")
    @classmethod
    def _subject_one_line(cls, v: str) -> str:
        if "\n" in v:
            raise ValueError("the subject is more than one line")
        return v


def _amount_spellings(amount: float) -> tuple[str, ...]:
    dot = f"{amount:.2f}"
    return (dot, dot.replace(".", ","))


def check(input: Any, output: Any, expect: Mapping[str, Any]) -> list[str]:
    """Return the facts the reply gets wrong or leaves out."""
    problems: list[str] = []
    body = str(output.get("body", ""))
    facts = input.get("facts", {})
    if "refund_amount" in facts and output.get("next_step") == "refund_issued":
        if not any(s in body for s in _amount_spellings(float(facts["refund_amount"]))):
            problems.append(f"a refund reply must state the amount {facts['refund_amount']:.2f}")
    if (
        "new_eta" in facts
        and input.get("issue") == "late_delivery"
        and facts["new_eta"] not in body
    ):
        problems.append(f"a late-delivery reply must give the new date {facts['new_eta']}")
    for phrase in expect.get("must_say", []):
        if phrase.casefold() not in body.casefold():
            problems.append(f"the reply must say {phrase!r}")
    return problems
