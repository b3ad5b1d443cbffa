"""How invoice-extraction@1 cases may vary, and what the extraction then is.

The relations rewrite the invoice text itself, in its own layout and number format
(1.156,00 € / $1,278.00 / 12'000.00 / ¥48,000), and recompute what they change:

- ``other-seller``, ``other-invoice-number``: another letterhead or number (and document id);
- ``shift-dates``: issue and due date moved by the same number of days, printed in the
  invoice's own date format; a due date from payment terms moves with the issue date;
- ``scale-quantities``, ``shift-prices``: every line's quantity multiplied or every unit
  price changed, the amounts, subtotal, tax (at the printed rate) and total recomputed;
- ``extra-line``: one more line of a product already billed, totals recomputed;
- ``reorder-lines``: the lines in another order (nothing changes).

A relation that cannot read a case with certainty (its line items do not add up to the
expected count and subtotal, a total it must rewrite is printed above the lines, a date it
must move is not printed in a format it knows) leaves that case alone.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import random
import re
from typing import Any

from contracts.relations import JAPANESE_COMPANY_STEMS, Relation, company, reshape

JSON = dict[str, Any]
NUMBER = re.compile(
    r"(?<![\w.,'/-])(?P<neg>-)?[£$€¥]?\s?(?P<neg2>-)?(?P<num>\d(?:[\d.,']*\d)?)"
    r"(?![\w/])(?P<pct>\s?%)?"
)
LINE_TOLERANCE = 0.011  # currency units: quantity x unit price against the printed amount
LEGAL_FORMS = ("GmbH", "AG", "SARL", "Ltd", "Inc.", "LLC", "B.V.", "BV", "Co.", "CO.", "SA")
MONTHS = (
    "January February March April May June July August September October November December"
).split()


@dataclasses.dataclass(frozen=True, slots=True)
class Amount:
    """One printed number: its value, where its digits are, and how it is written."""

    value: float
    start: int  #: of the digits (a sign or symbol around them stays as printed)
    end: int
    decimals: int
    decimal_mark: str  #: "." or "," (or "" for whole numbers)
    grouping: str  #: thousands separator as printed ("" when none)


def _amount(m: re.Match[str], offset: int = 0) -> Amount:
    text = m.group("num")
    grouping = "'" if "'" in text else ""
    mark, decimals = "", 0
    last = max(text.rfind("."), text.rfind(","))
    if last >= 0:
        tail = len(text) - last - 1
        if text[last] == "," and re.fullmatch(r"\d{1,3}(,\d{3})+", text):
            grouping = ","  # 48,000: thousands, no decimals
        else:
            mark, decimals = text[last], tail
            head = text[:last]
            grouping = grouping or next((c for c in ".," if c in head), "")
    digits = text.replace("'", "")
    if grouping:
        digits = digits.replace(grouping, "")
    value = float(digits.replace(mark, ".") if mark else digits)
    if m.group("neg") or m.group("neg2"):
        value = -value
    start, end = m.span("num")
    return Amount(value, start + offset, end + offset, decimals, mark, grouping)


def amounts(line: str) -> list[Amount]:
    """Return the numbers of one line (percentages left out)."""
    return [_amount(m) for m in NUMBER.finditer(line) if not m.group("pct")]


def render(value: float, like: Amount, grouping: str) -> str:
    """Write ``abs(value)`` the way ``like`` is written (the sign stays where it was)."""
    text = f"{abs(value):.{like.decimals}f}"
    whole, _, frac = text.partition(".")
    sep = like.grouping or grouping
    if sep and len(whole) > 3:
        groups = [whole[max(0, i - 3) : i] for i in range(len(whole), 0, -3)][::-1]
        whole = sep.join(groups)
    return whole + (like.decimal_mark + frac if like.decimals else "")


@dataclasses.dataclass(slots=True)
class Invoice:
    """The invoice text as lines, with its line items and totals found."""

    lines: list[str]
    items: dict[int, tuple[Amount, Amount, Amount]]  #: line index -> quantity, price, amount
    grouping: str  #: the thousands separator the document uses ("" when none)

    def text(self) -> str:
        """Return the invoice text."""
        return "\n".join(self.lines)


def _item(line: str) -> tuple[Amount, Amount, Amount] | None:
    found = amounts(line)
    if len(found) < 3 or line[found[-1].end :].strip(" €"):
        return None
    last = found[-1]
    for j in range(len(found) - 2, 0, -1):
        for i in range(j - 1, -1, -1):
            if math.fabs(found[i].value * found[j].value - last.value) <= LINE_TOLERANCE:
                return found[i], found[j], last
    return None


def read(input: JSON, expect: JSON) -> Invoice | None:
    """Find the line items; None unless they match the expected count and subtotal."""
    lines = input["text"].split("\n")
    items = {i: found for i, line in enumerate(lines) if (found := _item(line))}
    count, subtotal = expect.get("line_items"), expect.get("subtotal")
    if not items or count != len(items) or not isinstance(subtotal, int | float):
        return None
    if math.fabs(sum(a.value for _, _, a in items.values()) - subtotal) > 0.015:
        return None
    marks = {a.grouping for line in lines for a in amounts(line) if a.grouping}
    return Invoice(lines, items, marks.pop() if len(marks) == 1 else "")


def _replace(line: str, edits: list[tuple[Amount, str]]) -> str:
    for amount, text in sorted(edits, key=lambda e: e[0].start, reverse=True):
        line = line[: amount.start] + text + line[amount.end :]
    return line


def _retotal(invoice: Invoice, expect: JSON, subtotal: float) -> tuple[JSON, list[str]] | None:
    """Rewrite the subtotal, tax and total lines for a new subtotal; None if unsure."""
    first = min(invoice.items)
    old = {k: float(expect[k]) for k in ("subtotal", "tax", "total")}
    decimals = max(a.decimals for item in invoice.items.values() for a in item[1:])
    for line in invoice.lines[:first]:  # a total printed above the lines: do not guess
        if any(a.value in old.values() and a.value for a in amounts(line)):
            return None
    tax_line = next(
        (
            line
            for i, line in enumerate(invoice.lines)
            if i > first
            and i not in invoice.items
            and any(a.value == old["tax"] for a in amounts(line))
        ),
        None,
    )
    if tax_line is None:
        return None
    rate = next((m.group("num") for m in NUMBER.finditer(tax_line) if m.group("pct")), None)
    tax = 0.0
    if old["tax"]:
        ratio = float(rate.replace(",", ".")) / 100 if rate else None
        if ratio is not None and round(ratio * old["subtotal"], decimals) == old["tax"]:
            tax = round(ratio * subtotal, decimals)
        else:
            tax = round(old["tax"] * subtotal / old["subtotal"], decimals)
    new = {"subtotal": round(subtotal, decimals), "tax": tax}
    new["total"] = round(new["subtotal"] + tax, decimals)
    lines = list(invoice.lines)
    for i in range(first, len(lines)):
        if i in invoice.items:
            continue
        edits = []
        for a in amounts(lines[i]):
            key = next((k for k in ("subtotal", "total", "tax") if a.value == old[k]), None)
            if key is not None and (a.value or key != "tax"):
                edits.append((a, render(new[key], a, invoice.grouping)))
        lines[i] = _replace(lines[i], edits)
    return {**expect, **new}, lines


def _with_items(
    input: JSON, expect: JSON, invoice: Invoice, items: dict[int, tuple[float, float]]
) -> tuple[JSON, JSON] | None:
    """Rewrite the given lines to (quantity, unit price), amounts and totals recomputed."""
    lines = list(invoice.lines)
    subtotal = 0.0
    for i, (q, u, a) in invoice.items.items():
        quantity, price = items.get(i, (q.value, u.value))
        amount = round(quantity * price, a.decimals)
        subtotal += amount
        edits = [
            (q, render(quantity, q, "")),
            (u, render(price, u, invoice.grouping)),
            (a, render(amount, a, invoice.grouping)),
        ]
        lines[i] = _replace(lines[i], edits)
    retotalled = _retotal(Invoice(lines, invoice.items, invoice.grouping), expect, subtotal)
    if retotalled is None:
        return None
    expect, lines = retotalled
    input["text"] = "\n".join(lines)
    return input, expect


def scale_quantities(input: JSON, expect: JSON, rng: random.Random) -> tuple[JSON, JSON] | None:
    """Every line's quantity multiplied by the same factor."""
    invoice = read(input, expect)
    if invoice is None:
        return None
    factor = rng.choice((2, 3, 4, 5, 10))
    items = {i: (q.value * factor, u.value) for i, (q, u, _) in invoice.items.items()}
    return _with_items(input, expect, invoice, items)


def shift_prices(input: JSON, expect: JSON, rng: random.Random) -> tuple[JSON, JSON] | None:
    """Every unit price changed by the same factor (rounded as printed)."""
    invoice = read(input, expect)
    if invoice is None:
        return None
    factor = rng.choice((0.8, 0.9, 1.1, 1.25, 1.5))
    items = {
        i: (q.value, round(u.value * factor, u.decimals)) for i, (q, u, _) in invoice.items.items()
    }
    if any(p == 0 for _, p in items.values()):
        return None
    return _with_items(input, expect, invoice, items)


def extra_line(input: JSON, expect: JSON, rng: random.Random) -> tuple[JSON, JSON] | None:
    """One more line of a product already billed, with another quantity."""
    invoice = read(input, expect)
    if invoice is None:
        return None
    at = rng.choice(sorted(invoice.items))
    q, u, a = invoice.items[at]
    quantity = rng.choice([n for n in (1, 2, 3, 4, 6) if n != q.value])
    line = invoice.lines[at]
    copy_ = _replace(
        line,
        [
            (q, render(quantity, q, "")),
            (a, render(round(quantity * u.value, a.decimals), a, invoice.grouping)),
        ],
    )
    lines = [*invoice.lines[: at + 1], copy_, *invoice.lines[at + 1 :]]
    shifted = {(i + 1 if i > at else i): item for i, item in invoice.items.items()}
    shifted[at + 1] = _item(copy_) or (q, u, a)
    grown = Invoice(lines, shifted, invoice.grouping)
    subtotal = sum(item[2].value for item in shifted.values())
    retotalled = _retotal(grown, {**expect, "line_items": len(shifted)}, subtotal)
    if retotalled is None or _item(copy_) is None:
        return None
    expect, new_lines = retotalled
    input["text"] = "\n".join(new_lines)
    return input, expect


def reorder_lines(input: JSON, expect: JSON, rng: random.Random) -> tuple[JSON, JSON] | None:
    """The same line items in another order."""
    invoice = read(input, expect)
    if invoice is None or len(invoice.items) < 2:
        return None
    at = sorted(invoice.items)
    texts = [invoice.lines[i] for i in at]
    shuffled = texts[:]
    while shuffled == texts:
        rng.shuffle(shuffled)
    lines = list(invoice.lines)
    for i, text in zip(at, shuffled, strict=True):
        lines[i] = text
    input["text"] = "\n".join(lines)
    return input, expect


def other_seller(input: JSON, expect: JSON, rng: random.Random) -> tuple[JSON, JSON] | None:
    """Another company's letterhead (same legal form); the seller follows."""
    lines = input["text"].split("\n")
    top = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if top is None or " ".join(lines[top].split()) != expect.get("seller"):
        return None
    old = lines[top].strip()
    if old.startswith("株式会社"):
        new = "株式会社" + rng.choice([s for s in JAPANESE_COMPANY_STEMS if s not in old])
    else:
        form = next((f for f in LEGAL_FORMS if old.endswith(" " + f)), "")
        new = company(rng, avoid=old) + (f" {form}" if form else "")
        if old.isupper():
            new = new.upper()
    lines[top] = new
    input["text"] = "\n".join(lines)
    return input, {**expect, "seller": " ".join(new.split())}


def other_number(input: JSON, expect: JSON, rng: random.Random) -> tuple[JSON, JSON] | None:
    """Another invoice number of the same shape, and another document id."""
    number = expect.get("invoice_number")
    if not isinstance(number, str) or number not in input["text"]:
        return None
    new = reshape(number, rng)
    input["text"] = input["text"].replace(number, new)
    input["document_id"] = reshape(input["document_id"], rng)
    return input, {**expect, "invoice_number": new}


def _spellings(day: dt.date) -> list[tuple[str, str]]:
    """Return (printed, format) for every way the catalog's invoices print a date."""
    month = MONTHS[day.month - 1]
    return [
        (day.isoformat(), "iso"),
        (f"{day.day:02d}.{day.month:02d}.{day.year}", "dmy."),
        (f"{day.day:02d}/{day.month:02d}/{day.year}", "dmy/"),
        (f"{day.month:02d}/{day.day:02d}/{day.year}", "mdy/"),
        (f"{day.day} {month} {day.year}", "d month y"),
        (f"{month} {day.day}, {day.year}", "month d, y"),
        (f"{day.year}年{day.month}月{day.day}日", "ja"),
    ]


def _find_date(text: str, day: dt.date, currency: str) -> tuple[str, str] | None:
    for printed, fmt in _spellings(day):
        if fmt in ("dmy/", "mdy/") and (fmt == "mdy/") != (currency == "USD"):
            continue  # 03/04/2026 is March 4th on a US invoice, 3 April elsewhere
        if re.search(rf"(?<!\d){re.escape(printed)}(?!\d)", text):
            return printed, fmt
    return None


def _from_terms(text: str, issue: str, due: str) -> bool:
    """Say whether the text gives the due date as payment terms (net N, within N days)."""
    delta = (dt.date.fromisoformat(due) - dt.date.fromisoformat(issue)).days
    terms = rf"(net|within|innert|zahlbar|payment)[^\n]*(?<!\d){delta}(?!\d)"
    return re.search(terms, text, re.IGNORECASE) is not None


def shift_dates(input: JSON, expect: JSON, rng: random.Random) -> tuple[JSON, JSON] | None:
    """Issue and due date (and the day it was received) moved by the same days."""
    issue, due = expect.get("issue_date"), expect.get("due_date")
    if not isinstance(issue, str) or not isinstance(expect.get("currency"), str):
        return None
    days = rng.choice((-1, 1)) * rng.randrange(3, 400)
    text = input["text"]
    moves: dict[str, str] = {}
    for value in (issue, due):
        if value is None:
            continue
        old = dt.date.fromisoformat(value)
        found = _find_date(text, old, expect["currency"])
        if found is None:
            if value == due and _from_terms(text, issue, due):
                continue  # a due date from payment terms moves with the issue date
            return None
        printed, fmt = found
        moves[printed] = {f: p for p, f in _spellings(old + dt.timedelta(days=days))}[fmt]
    # One pass: a moved issue date may read like the old due date.
    pattern = "|".join(re.escape(p) for p in sorted(moves, key=len, reverse=True))
    text = re.sub(rf"(?<!\d)(?:{pattern})(?!\d)", lambda m: moves[m.group(0)], text)
    input["text"] = text
    received = dt.date.fromisoformat(input["received_on"]) + dt.timedelta(days=days)
    input["received_on"] = received.isoformat()
    shifted = {
        "issue_date": (dt.date.fromisoformat(issue) + dt.timedelta(days=days)).isoformat(),
        "due_date": (
            (dt.date.fromisoformat(due) + dt.timedelta(days=days)).isoformat() if due else due
        ),
    }
    return input, {**expect, **shifted}


RELATIONS = (
    Relation("other-seller", "another letterhead; the seller follows", other_seller, ("seller",)),
    Relation(
        "other-invoice-number",
        "another invoice number of the same shape (and document id)",
        other_number,
        ("invoice_number",),
    ),
    Relation(
        "shift-dates",
        "issue and due date moved by the same days, in the invoice's date format",
        shift_dates,
        ("issue_date", "due_date"),
    ),
    Relation(
        "scale-quantities",
        "every quantity multiplied; amounts, subtotal, tax and total recomputed",
        scale_quantities,
        ("subtotal", "tax", "total"),
    ),
    Relation(
        "shift-prices",
        "every unit price changed by one factor; amounts and totals recomputed",
        shift_prices,
        ("subtotal", "tax", "total"),
    ),
    Relation(
        "extra-line",
        "one more line of a product already billed; line count and totals recomputed",
        extra_line,
        ("line_items", "subtotal", "tax", "total"),
    ),
    Relation("reorder-lines", "the line items in another order", reorder_lines),
)
