"""Python checks for ticket-triage@1 that declarations cannot say."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Output(BaseModel):
    """The triage answer, typed."""

    model_config = ConfigDict(extra="forbid", strict=True)

    category: Literal[
        "billing", "technical", "account", "shipping", "refund", "security", "feedback", "other"
    ]
    priority: Literal["low", "normal", "high", "urgent"]
    summary: str = Field(min_length=1, max_length=200)
    needs_human: bool
    language: str = Field(pattern=r"^[a-z]{2}$")

    @field_validator("summary")
    @classmethod
    def _summary_has_words(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("summary is blank")
        return v


def check(input: Any, output: Any, expect: Mapping[str, Any]) -> list[str]:
    """Return the cross-field rules the answer breaks."""
    problems: list[str] = []
    if output.get("category") == "security" and output.get("priority") not in ("high", "urgent"):
        problems.append("a security ticket must be high or urgent priority")
    escalate = output.get("priority") in ("high", "urgent") or output.get("category") in (
        "refund",
        "security",
    )
    if output.get("needs_human") is not escalate:
        problems.append(f"needs_human must be {escalate} for this category and priority")
    return problems
