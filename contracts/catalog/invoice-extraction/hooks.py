"""Python checks for invoice-extraction@1 that declarations cannot say."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

LINE_TOLERANCE = 0.015  # currency units: rounding of quantity x unit price


class LineItem(BaseModel):
    """One billed line."""

    model_config = ConfigDict(extra="forbid")

    description: str = Field(min_length=1, max_length=300)
    quantity: float
    unit_price: float
    amount: float


class Output(BaseModel):
    """The extracted invoice, typed: real dates, due date not before issue date."""

    model_config = ConfigDict(extra="forbid")

    invoice_number: str = Field(min_length=1, max_length=64)
    seller: str = Field(min_length=1, max_length=200)
    issue_date: dt.date
    due_date: dt.date | None
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    line_items: list[LineItem] = Field(min_length=1)
    subtotal: float
    tax: float = Field(ge=0)
    total: float

    @model_validator(mode="after")
    def _due_after_issue(self) -> Output:
        if self.due_date is not None and self.due_date < self.issue_date:
            raise ValueError(f"due_date {self.due_date} is before issue_date {self.issue_date}")
        return self


def check(input: Any, output: Any, expect: Mapping[str, Any]) -> list[str]:
    """Return the line items whose amount is not quantity x unit price."""
    problems: list[str] = []
    for i, item in enumerate(output.get("line_items") or [], start=1):
        try:
            want = float(item["quantity"]) * float(item["unit_price"])
            got = float(item["amount"])
        except (KeyError, TypeError, ValueError):
            problems.append(f"line {i} has no numeric quantity, unit_price and amount")
            continue
        if math.fabs(want - got) > LINE_TOLERANCE:
            problems.append(
                f"line {i} ({item.get('description')!r}): {item['quantity']} x "
                f"{item['unit_price']} = {want:.2f}, but amount is {got:.2f}"
            )
    return problems
