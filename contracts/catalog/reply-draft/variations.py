"""How reply-draft@1 cases may vary, and what the reply then is (``contracts.relations``).

``next_step`` follows from the issue and the facts alone, and the reply's language is the
one the input asks for, so who writes, in which language they write, what they quote and
the exact refund amount or delivery date change neither; asking for the reply in another
language changes ``language`` (and the language the body must be written in) and nothing
else. Cases that exist for their message (an injection, special tokens, a long history)
keep it: the relations that replace or extend the message leave them alone.
"""

from __future__ import annotations

import random
from typing import Any

from contracts.relations import Relation, person, replace_word, reshape, shift_iso

JSON = dict[str, Any]
LANGUAGES = ("en", "de", "es", "fr")
CURRENCIES = ("EUR", "USD", "GBP", "CHF", "SEK")
#: A neutral customer message per issue and language: it asks for nothing the facts decide.
MESSAGES = {
    "late_delivery": {
        "en": "My order still hasn't arrived. Can you tell me where it is?",
        "de": "Meine Bestellung ist immer noch nicht angekommen. Wo ist sie?",
        "es": "Mi pedido todavía no ha llegado. ¿Dónde está?",
        "fr": "Ma commande n'est toujours pas arrivée. Où en est-elle ?",
    },
    "wrong_item": {
        "en": "The parcel contained a different product from the one I ordered.",
        "de": "Im Paket war ein anderer Artikel als der, den ich bestellt habe.",
        "es": "En el paquete venía un artículo distinto del que pedí.",
        "fr": "Le colis contenait un autre article que celui que j'ai commandé.",
    },
    "damaged_item": {
        "en": "The item arrived broken, the box was crushed.",
        "de": "Der Artikel kam kaputt an, der Karton war eingedrückt.",
        "es": "El artículo llegó roto, la caja estaba aplastada.",
        "fr": "L'article est arrivé cassé, le carton était écrasé.",
    },
    "refund_status": {
        "en": "I sent the item back a while ago. When will I get my money?",
        "de": "Ich habe den Artikel vor einiger Zeit zurückgeschickt. Wann bekomme ich mein Geld?",
        "es": "Devolví el artículo hace tiempo. ¿Cuándo recibiré mi dinero?",
        "fr": "J'ai renvoyé l'article il y a quelque temps. Quand vais-je récupérer mon argent ?",
    },
    "cancellation": {
        "en": "Please cancel my order, I no longer need it.",
        "de": "Bitte stornieren Sie meine Bestellung, ich brauche sie nicht mehr.",
        "es": "Por favor, cancelen mi pedido, ya no lo necesito.",
        "fr": "Merci d'annuler ma commande, je n'en ai plus besoin.",
    },
}
QUOTE = {
    "en": "> On {day}, Customer Care wrote:\n> Thank you for your message. We have received it "
    "and will answer as soon as possible.",
    "de": "> Am {day} schrieb der Kundenservice:\n> Vielen Dank für Ihre Nachricht. Wir haben "
    "sie erhalten und antworten so bald wie möglich.",
    "es": "> El {day}, Atención al cliente escribió:\n> Gracias por su mensaje. Lo hemos "
    "recibido y le responderemos lo antes posible.",
    "fr": "> Le {day}, le service client a écrit :\n> Merci pour votre message. Nous l'avons "
    "bien reçu et vous répondrons au plus vite.",
}
#: Cases that exist for their message keep it.
KEEP_MESSAGE = ("injection", "special-tokens", "long")


def other_customer(input: JSON, expect: JSON, rng: random.Random) -> tuple[JSON, JSON] | None:
    """Another customer, agent and order id; the message follows."""
    old_name, old_order = input["customer_name"], input["order_id"]
    given, family = person(rng, avoid=old_name)
    input["customer_name"] = f"{given} {family}"
    input["agent_name"] = person(rng, avoid=input["agent_name"] + given)[0]
    input["order_id"] = reshape(old_order, rng)
    message = input["customer_message"].replace(old_order, input["order_id"])
    input["customer_message"] = replace_word(message, old_name, input["customer_name"])
    return input, expect


def message_language(input: JSON, expect: JSON, rng: random.Random) -> tuple[JSON, JSON] | None:
    """The customer's message written in another supported language."""
    pool = MESSAGES[input["issue"]]
    choices = [text for text in pool.values() if text != input["customer_message"]]
    input["customer_message"] = rng.choice(choices)
    return input, expect


def reply_language(input: JSON, expect: JSON, rng: random.Random) -> tuple[JSON, JSON] | None:
    """The reply asked in another language: its language (and body's) follow."""
    input["language"] = rng.choice([lang for lang in LANGUAGES if lang != input["language"]])
    return input, expect


def quoted_thread(input: JSON, expect: JSON, rng: random.Random) -> tuple[JSON, JSON] | None:
    """Customer care's acknowledgement quoted under the message, as in an email reply."""
    lang = rng.choice(LANGUAGES)
    day = f"2026-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
    input["customer_message"] += "\n\n" + QUOTE[lang].format(day=day)
    return input, expect


def other_refund(input: JSON, expect: JSON, rng: random.Random) -> tuple[JSON, JSON] | None:
    """Another refund amount (and currency): the reply states the new one."""
    facts = input["facts"]
    if "refund_amount" not in facts:
        return None
    amount = facts["refund_amount"]
    while amount == facts["refund_amount"]:
        amount = round(rng.uniform(2, 950), 2)
    facts["refund_amount"] = amount
    if rng.random() < 0.5:
        facts["currency"] = rng.choice([c for c in CURRENCIES if c != facts.get("currency")])
    return input, expect


def other_eta(input: JSON, expect: JSON, rng: random.Random) -> tuple[JSON, JSON] | None:
    """Another new delivery date: the reply gives the new one."""
    facts = input["facts"]
    if "new_eta" not in facts:
        return None
    old = facts["new_eta"]
    facts["new_eta"] = shift_iso(old, rng.choice((-1, 1)) * rng.randrange(1, 60))
    input["customer_message"] = input["customer_message"].replace(old, facts["new_eta"])
    return input, expect


RELATIONS = (
    Relation(
        "other-customer",
        "another customer, agent and order id; the reply names the new ones",
        other_customer,
    ),
    Relation(
        "message-language",
        "the customer writes in another supported language; the reply does not change",
        message_language,
        skip_tags=KEEP_MESSAGE,
    ),
    Relation(
        "reply-language",
        "the reply is asked in another language; its language follows",
        reply_language,
        ("language",),
    ),
    Relation(
        "quoted-thread",
        "customer care's acknowledgement quoted under the message",
        quoted_thread,
        skip_tags=("long",),
    ),
    Relation("other-refund", "another refund amount and currency", other_refund),
    Relation("other-eta", "another new delivery date", other_eta),
)
