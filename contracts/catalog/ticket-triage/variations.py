"""How ticket-triage@1 cases may vary without changing the triage (``contracts.relations``).

Category, priority, needs_human and language follow from what the customer asks and the
language they write in: not from who they are, how they sign, which channel they used, a
quoted acknowledgement under their message, or a free/pro plan (only an enterprise outage
changes the priority, so the plan relation leaves enterprise tickets alone). Every relation
here keeps the expected answer; the language code depends on the text, so no relation
translates a ticket.
"""

from __future__ import annotations

import random
from typing import Any

from contracts.relations import (
    Relation,
    company,
    person,
    replace_word,
    reshape,
)

JSON = dict[str, Any]
CHANNELS = ("email", "chat", "web", "phone")
#: A sign-off in the language the ticket is written in (``expect.language``).
SIGN_OFF = {
    "en": "Best regards,",
    "de": "Viele Grüße",
    "es": "Saludos,",
    "fr": "Cordialement,",
    "ja": "よろしくお願いいたします。",
    "ar": "مع التحية،",
}
GREETING = {
    "en": "Hello,",
    "de": "Guten Tag,",
    "es": "Hola:",
    "fr": "Bonjour,",
    "ja": "お世話になっております。",
    "ar": "مرحبا،",
}
#: The help desk's automatic acknowledgement, quoted under the customer's message.
ACKNOWLEDGEMENT = {
    "en": "> On {day}, Customer Care wrote:\n> Thank you for contacting us. We have received "
    "your message and will reply within two working days.",
    "de": "> Am {day} schrieb der Kundenservice:\n> Vielen Dank für Ihre Nachricht. Wir melden "
    "uns innerhalb von zwei Werktagen.",
    "es": "> El {day}, Atención al cliente escribió:\n> Gracias por su mensaje. Le responderemos "
    "en un plazo de dos días laborables.",
    "fr": "> Le {day}, le service client a écrit :\n> Merci pour votre message. Nous vous "
    "répondrons sous deux jours ouvrés.",
    "ja": "> {day} カスタマーサポート:\n> お問い合わせいただきありがとうございます。"
    "二営業日以内にご連絡いたします。",
    "ar": "> في {day} كتب فريق خدمة العملاء:\n> شكرا لتواصلك معنا. سنرد عليك خلال يومي عمل.",
}


def _language(expect: JSON) -> str | None:
    lang = expect.get("language")
    return lang if isinstance(lang, str) and lang in SIGN_OFF else None


def other_customer(input: JSON, expect: JSON, rng: random.Random) -> tuple[JSON, JSON] | None:
    """Another customer and ticket id; the old name in the text becomes the new one."""
    old = input["customer"]["name"]
    given, family = person(rng, avoid=old)
    new = f"{given} {family}"
    if "(" in old and old.endswith(")"):  # "Marcus Lee (Acme Logistics)": a company too
        new = f"{new} ({company(rng, avoid=old)})"
    input["customer"]["name"] = new
    input["ticket_id"] = reshape(input["ticket_id"], rng)
    first = old.split()[0]
    for field in ("subject", "body"):
        text = input[field].replace(old, f"{given} {family}")
        input[field] = replace_word(text, first, given) if first.isalpha() else text
    return input, expect


def signature(input: JSON, expect: JSON, rng: random.Random) -> tuple[JSON, JSON] | None:
    """A sign-off and signature in the ticket's language under the message."""
    lang = _language(expect)
    if lang is None:
        return None
    name = input["customer"]["name"]
    input["body"] = f"{input['body'].rstrip()}\n\n{SIGN_OFF[lang]}\n{name}"
    if rng.random() < 0.5:
        input["body"] += f"\n{company(rng, avoid=input['body'])}"
    return input, expect


def quoted_acknowledgement(
    input: JSON, expect: JSON, rng: random.Random
) -> tuple[JSON, JSON] | None:
    """The help desk's automatic acknowledgement quoted under the message (an email reply)."""
    lang = _language(expect)
    if lang is None:
        return None
    day = f"2026-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
    input["body"] = f"{input['body'].rstrip()}\n\n{ACKNOWLEDGEMENT[lang].format(day=day)}"
    return input, expect


def greeting(input: JSON, expect: JSON, rng: random.Random) -> tuple[JSON, JSON] | None:
    """A greeting in the ticket's language above a message that starts without one."""
    lang = _language(expect)
    if lang is None:
        return None
    words = GREETING[lang].rstrip(",:。،").casefold()
    if input["body"].casefold().startswith((words, "hi", "hallo", "bonjour", "hola")):
        return None
    input["body"] = f"{GREETING[lang]}\n\n{input['body']}"
    return input, expect


def other_channel(input: JSON, expect: JSON, rng: random.Random) -> tuple[JSON, JSON] | None:
    """The same ticket received through another channel."""
    input["channel"] = rng.choice([c for c in CHANNELS if c != input["channel"]])
    return input, expect


def other_plan(input: JSON, expect: JSON, rng: random.Random) -> tuple[JSON, JSON] | None:
    """A free customer on the pro plan or the other way round (never enterprise)."""
    plan = input["customer"]["plan"]
    if plan == "enterprise":
        return None
    input["customer"]["plan"] = "pro" if plan == "free" else "free"
    return input, expect


RELATIONS = (
    Relation(
        "other-customer",
        "another customer name (and company) and ticket id; the triage is unchanged",
        other_customer,
    ),
    Relation("signature", "a sign-off and signature in the ticket's language", signature),
    Relation(
        "quoted-acknowledgement",
        "the help desk's acknowledgement quoted under the message, in the ticket's language",
        quoted_acknowledgement,
    ),
    Relation("greeting", "a greeting in the ticket's language above the message", greeting),
    Relation("other-channel", "the ticket arrives through another channel", other_channel),
    Relation("other-plan", "free becomes pro and pro free; enterprise is left alone", other_plan),
)
