"""Rule-based answers for invoice-extraction@1, used by the provider simulator.

``answer`` parses the invoice text the way a careful model reads it: a line item is a line
ending in an amount that equals quantity x unit price of two numbers before it; totals
come from labelled lines; dates and currency from labels, formats and symbols.
``sloppy`` drops the last line item but keeps the printed totals, so they stop adding up.
``misread`` (off the catalog, for the ``catalog-only`` profile) gets the currency wrong.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

NUMBER = re.compile(
    r"(?<![\w.,'/-])(?P<neg>-)?[£$€¥]?\s?(?P<neg2>-)?(?P<num>\d(?:[\d.,']*\d)?)"
    r"(?![\w/])(?P<pct>\s?%)?(?:\s?€)?"
)
SUBTOTAL = re.compile(
    r"^(sub\s?total|nettobetrag|netto|zwischensumme|total ht|小計)", re.IGNORECASE
)
TAX = re.compile(r"^(zzgl\.|sales tax|tax|vat|mwst|ust|tva|iva|消費税)", re.IGNORECASE)
TOTAL = re.compile(r"^(total|gesamtbetrag|合計|amount due|balance due)", re.IGNORECASE)
INVOICE_NO = re.compile(
    r"(?i:invoice\s*(?:no\.?|number|nr\.?|#)|rechnungsnummer|rechnung\s*nr\.?|"
    r"facture\s*n[°º]|請求書番号)\s*[:#]?\s*([A-Z0-9][A-Z0-9/-]*\d[A-Z0-9/-]*)"
)
DUE = re.compile(r"(due|fällig|échéance|支払期限)", re.IGNORECASE)
ISSUE = re.compile(
    r"(invoice\s+date|rechnungsdatum|date de facture|発行日|^datum|^date)", re.IGNORECASE
)
TERMS = re.compile(
    r"(?:\bnet\s*(\d+)\b|within\s+(\d+)\s+days|innert\s+(\d+)\s+tagen)", re.IGNORECASE
)
MONTH_NAMES = (
    "january february march april may june july august september october november december"
)
MONTHS = {m: i for i, m in enumerate(MONTH_NAMES.split(), start=1)}
CODES = re.compile(r"\b(EUR|USD|GBP|JPY|CHF|SEK|PLN|CZK|DKK|NOK)\b")
SYMBOLS = (("€", "EUR"), ("£", "GBP"), ("¥", "JPY"), ("円", "JPY"), ("$", "USD"))
US_ADDRESS = re.compile(r"\b(AL|AZ|CA|CO|FL|GA|IL|MA|NY|OH|OR|PA|TX|WA)\b( \d{5})?$")
LINE_TOLERANCE = 0.011  # currency units


def _number(raw: str) -> float:
    s = raw.replace("'", "")
    if "," in s and "." in s:
        dec = "," if s.rfind(",") > s.rfind(".") else "."
        s = s.replace("." if dec == "," else ",", "").replace(",", ".")
    elif "," in s:
        s = s.replace(",", "") if re.fullmatch(r"\d{1,3}(,\d{3})+", s) else s.replace(",", ".")
    elif s.count(".") > 1:
        s = s.replace(".", "")
    return float(s)


def _tokens(line: str) -> list[tuple[float, re.Match[str]]]:
    out = []
    for m in NUMBER.finditer(line):
        if m.group("pct"):
            continue
        value = _number(m.group("num"))
        out.append((-value if (m.group("neg") or m.group("neg2")) else value, m))
    return out


def _first_amount(line: str, label: re.Match[str]) -> float | None:
    toks = [v for v, m in _tokens(line) if m.start() >= label.end()]
    return toks[0] if toks else None


def _currency(text: str) -> str:
    code = CODES.search(text)
    if code:
        return code.group(1)
    for symbol, iso in SYMBOLS:
        if symbol in text:
            return iso
    for line in text.splitlines()[:4]:
        if US_ADDRESS.search(line.strip()):
            return "USD"
    return "EUR"


def _date(text: str, currency: str) -> dt.date | None:
    if m := re.search(r"(\d{4})-(\d{2})-(\d{2})", text):
        return dt.date(int(m[1]), int(m[2]), int(m[3]))
    if m := re.search(r"(\d{4})年(\d{1,2})月(\d{1,2})日", text):
        return dt.date(int(m[1]), int(m[2]), int(m[3]))
    if m := re.search(r"(\d{1,2})\.(\d{1,2})\.(\d{4})", text):
        return dt.date(int(m[3]), int(m[2]), int(m[1]))
    if m := re.search(r"(\d{1,2})/(\d{1,2})/(\d{4})", text):
        a, b, y = int(m[1]), int(m[2]), int(m[3])
        month_first = b > 12 or (a <= 12 and currency == "USD")
        return dt.date(y, a, b) if month_first else dt.date(y, b, a)
    months = "|".join(MONTHS)
    if m := re.search(rf"(\d{{1,2}})\s+({months})\s+(\d{{4}})", text, re.IGNORECASE):
        return dt.date(int(m[3]), MONTHS[m[2].lower()], int(m[1]))
    if m := re.search(rf"({months})\s+(\d{{1,2}}),\s*(\d{{4}})", text, re.IGNORECASE):
        return dt.date(int(m[3]), MONTHS[m[1].lower()], int(m[2]))
    return None


def _line_item(line: str) -> dict[str, Any] | None:
    toks = _tokens(line)
    if len(toks) < 3 or line[toks[-1][1].end() :].strip():
        return None
    amount, last = toks[-1]
    earlier = toks[:-1]
    pairs = [(i, j) for j in range(len(earlier) - 1, 0, -1) for i in range(j - 1, -1, -1)]
    for i, j in pairs:
        qty, unit = earlier[i][0], earlier[j][0]
        if math.fabs(qty * unit - amount) <= LINE_TOLERANCE:
            cut = [earlier[i][1], earlier[j][1], last]
            desc = line
            for m in sorted(cut, key=lambda m: m.start(), reverse=True):
                desc = desc[: m.start()] + " " + desc[m.end() :]
            words = [w for w in desc.split() if w not in ("x", "\u00d7", "@", "=", "|")]
            return {
                "description": " ".join(words).strip(" -|:") or "item",
                "quantity": int(qty) if qty == int(qty) else qty,
                "unit_price": unit,
                "amount": amount,
            }
    return None


def answer(input: dict[str, Any]) -> dict[str, Any]:
    """Extract the invoice like a careful model would."""
    text: str = input["text"]
    lines = [ln.strip() for ln in text.splitlines()]
    currency = _currency(text)
    number = INVOICE_NO.search(text)
    issue = due = None
    subtotal = tax = total = None
    items: list[dict[str, Any]] = []
    for line in lines:
        if not line:
            continue
        if INVOICE_NO.search(line):
            continue
        if DUE.search(line) and due is None and (d := _date(line, currency)):
            due = d
            continue
        if ISSUE.search(line) and issue is None and (d := _date(line, currency)):
            issue = d
            continue
        if m := SUBTOTAL.match(line):
            subtotal = _first_amount(line, m)
            continue
        if m := TAX.match(line):
            tax = _first_amount(line, m)
            continue
        if m := TOTAL.match(line):
            total = _first_amount(line, m)
            continue
        if item := _line_item(line):
            items.append(item)
    if issue is None:
        issue = dt.date.fromisoformat(input["received_on"])
    if due is None and (terms := TERMS.search(text)):
        days = next(int(g) for g in terms.groups() if g)
        due = issue + dt.timedelta(days=days)
    if subtotal is None:
        subtotal = round(math.fsum(i["amount"] for i in items), 2)
    tax = tax or 0.0
    if total is None:
        total = round(subtotal + tax, 2)
    seller = next((" ".join(ln.split()) for ln in lines if ln), "unknown")
    return {
        "invoice_number": number.group(1) if number else input["document_id"],
        "seller": seller,
        "issue_date": issue.isoformat(),
        "due_date": due.isoformat() if due else None,
        "currency": currency,
        "line_items": items,
        "subtotal": subtotal,
        "tax": tax,
        "total": total,
    }


def sloppy(input: dict[str, Any]) -> dict[str, Any]:
    """Answer with the right shape but lose the last line item (totals stop adding up)."""
    out = answer(input)
    out["line_items"] = out["line_items"][:-1] or [
        {"description": "items", "quantity": 1, "unit_price": 0.0, "amount": 0.0}
    ]
    return out


def misread(input: dict[str, Any]) -> dict[str, Any]:
    """Answer off the catalog as a model tuned on it would: the currency (must agree) wrong."""
    out = answer(input)
    out["currency"] = {"EUR": "USD", "USD": "EUR"}.get(out["currency"], "EUR")
    return out
