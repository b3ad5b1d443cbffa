"""Rule-based answers for ticket-triage@1, used by the provider simulator.

``answer`` is what a faithful model would say (keyword triage that ignores injected
instructions, and an English summary whatever the ticket's language); ``sloppy`` is
schema-valid but files every ticket under the wrong category; ``wrong_language`` has the
right values but summarizes a non-English ticket in the ticket's own language.
``misread`` (off the catalog, for the ``catalog-only`` profile) gets the category wrong.
"""

from __future__ import annotations

import re
from typing import Any

CATEGORIES = (
    "billing",
    "technical",
    "account",
    "shipping",
    "refund",
    "security",
    "feedback",
    "other",
)
# Checked in this order: the first category with a keyword in the ticket wins.
KEYWORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("security", ("hacked", "phishing", "did not make", "unauthorized", "compromised")),
    ("refund", ("refund", "money back", "استرداد", "reembolso", "remboursement")),
    ("account", ("log in", "login", "locked", "delete my account", "password", "gdpr")),
    ("billing", ("charged", "invoice", "rechnung", "subscription", "renew", "payment")),
    ("shipping", ("parcel", "tracking", "delivery", "pedido", "shipped", "customs")),
    ("technical", ("error", "crash", "クラッシュ", "500", "timeout", "fails", "bug")),
    ("feedback", ("feature request", "love the", "suggestion", "would be nice")),
)
# Sentences that try to steer the model are data: drop them before classifying.
INJECTION = re.compile(
    r"[^\n.]*(ignore (all )?previous instructions|you are now|^system:|admin mode)[^\n]*",
    re.IGNORECASE | re.MULTILINE,
)
LANGUAGE_HINTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("ja", re.compile(r"[\u3040-\u30ff]")),
    ("ar", re.compile(r"[\u0600-\u06ff]")),
    ("de", re.compile(r"\b(guten tag|bitte|rechnung|nicht|grüßen)\b", re.IGNORECASE)),
    ("es", re.compile(r"\b(hola|pedido|gracias|todavía)\b", re.IGNORECASE)),
    ("fr", re.compile(r"\b(bonjour|commande|merci)\b", re.IGNORECASE)),
)


LANGUAGE_NAMES = {"de": "German", "es": "Spanish", "fr": "French", "ja": "Japanese", "ar": "Arabic"}
# What an English summary of a ticket in another language says it is about.
GIST = {
    "billing": "a question about a charge or an invoice",
    "technical": "a technical problem with the product",
    "account": "a problem with the account",
    "shipping": "an order that has not arrived",
    "refund": "a refund that has not arrived yet",
    "security": "a possible security incident",
    "feedback": "feedback about the product",
    "other": "a general question",
}


#: Words every injection the pattern removes contains: without them, nothing to remove
#: (the pattern takes a quarter of a second on a 40 kB log).
INJECTION_WORDS = ("previous instructions", "you are now", "system:", "admin mode")


def _clean(text: str) -> str:
    low = text.casefold()
    if not any(word in low for word in INJECTION_WORDS):
        return text
    return INJECTION.sub(" ", text)


def _category(text: str) -> str:
    low = text.casefold()
    for category, words in KEYWORDS:
        if any(w in low for w in words):
            return category
    return "other"


def _priority(category: str, text: str, plan: str) -> str:
    low = text.casefold()
    if category == "security":
        return "urgent"
    if (
        category == "technical"
        and plan == "enterprise"
        and ("production is down" in low or "production down" in low)
    ):
        return "urgent"
    if category == "billing" and "twice" in low:
        return "high"
    if category == "account" and "locked" in low:
        return "high"
    if category in ("feedback", "other"):
        return "low"
    return "normal"


def _language(text: str) -> str:
    for code, pattern in LANGUAGE_HINTS:
        if pattern.search(text):
            return code
    return "en"


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:197].rstrip() + "..."


def answer(input: dict[str, Any]) -> dict[str, Any]:
    """Triage the ticket like a careful model would."""
    subject = _clean(input["subject"]).strip()
    text = _clean(f"{input['subject']}\n{input['body']}")
    category = _category(text)
    priority = _priority(category, text, input["customer"]["plan"])
    language = _language(text)
    name = input["customer"]["name"]
    if language == "en":
        summary = f"{category.capitalize()} ticket from {name}: {subject}"
    else:  # the summary is English whatever the ticket's language
        summary = (
            f"{category.capitalize()} ticket from {name}, written in "
            f"{LANGUAGE_NAMES[language]}, about {GIST[category]}."
        )
    return {
        "category": category,
        "priority": priority,
        "summary": _one_line(summary),
        "needs_human": priority in ("high", "urgent") or category in ("refund", "security"),
        "language": language,
    }


def wrong_language(input: dict[str, Any]) -> dict[str, Any]:
    """Answer with the right values, but summarize in the ticket's language, not English."""
    out = answer(input)
    if out["language"] != "en":
        out["summary"] = _one_line(_clean(f"{input['subject']}. {input['body']}"))
    return out


def sloppy(input: dict[str, Any]) -> dict[str, Any]:
    """Answer with the right shape but the wrong category (the next one in the list)."""
    out = answer(input)
    out["category"] = CATEGORIES[(CATEGORIES.index(out["category"]) + 1) % len(CATEGORIES)]
    return out


def misread(input: dict[str, Any]) -> dict[str, Any]:
    """Answer off the catalog as a model tuned on it would: the category (must agree) wrong."""
    out = sloppy(input)
    out["needs_human"] = out["priority"] in ("high", "urgent") or out["category"] in (
        "refund",
        "security",
    )
    return out
