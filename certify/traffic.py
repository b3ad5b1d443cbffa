"""Production-like inputs: what real customers send, drawn from a seed (issue 48).

``onejob certify --production N`` judges a fallback on the inputs of real jobs. To try it
against the simulator, or to test it, there must first be real-looking jobs: tickets
nobody wrote into the catalog, about other products and problems, in the languages the
catalog covers. ``ticket_traffic`` writes them from the templates below (a subject and a
body per kind of request, with slots for products, orders, amounts and days) and then
varies each through the contract's own relations (``variations.py``: another customer, a
signature, a greeting, a quoted acknowledgement, another channel or plan), so the traffic
looks like the catalog's without being the catalog's. The same seed gives the same
inputs. Only ticket-triage@1 has templates: it is the hedgeable contract whose variants
all keep the answer.
"""

from __future__ import annotations

import copy
import random
from typing import Any

from contracts.model import Contract
from contracts.relations import person

TICKET_TRIAGE = "ticket-triage@1"
#: (language, subject, body) per kind of request; ``{…}`` are slots filled per ticket.
TEMPLATES: tuple[tuple[str, str, str], ...] = (
    ("en", "Invoice {order} shows the wrong VAT number",
     "The invoice for order {order} lists our old VAT number. Our accountant needs a "
     "corrected copy before the end of {month}."),
    ("en", "Why was my payment declined?",
     "I tried to upgrade to the annual plan three times today and each payment was "
     "declined, although my bank says the card works. Can you check what happens?"),
    ("en", "Subscription renewed after I cancelled",
     "I cancelled in {month} but the subscription renewed anyway and I was charged "
     "{amount}. Please stop the renewal."),
    ("en", "{product} app crashes on startup",
     "Since the update yesterday the {product} app shows a white screen and then an "
     "error dialog. Reinstalling did not help. Phone: {device}."),
    ("en", "Export to CSV fails with a timeout",
     "When I export more than {days} days of reports the export fails after a minute "
     "with a timeout. Smaller exports work."),
    ("en", "Sync stopped working between laptop and phone",
     "Notes I write on the laptop no longer show up on my phone. The last sync was "
     "{days} days ago and there is no error message at all."),
    ("en", "Cannot log in after changing my email address",
     "I changed my email address last week and now the login page says the account "
     "does not exist. I still get your newsletters at the new address."),
    ("en", "Please delete my account and data",
     "I no longer use {product}. Please delete my account and every piece of data you "
     "hold about me, and confirm when it is done."),
    ("en", "Two-factor codes never arrive",
     "The SMS with the login code never arrives, so I am stuck at the second step. I "
     "tried for {days} days now."),
    ("en", "Order {order} still not delivered",
     "My order {order} was supposed to arrive on Monday. The tracking page has said "
     "'out for delivery' for {days} days. Where is it?"),
    ("en", "Wrong item in my package",
     "I ordered the {product} in grey and received a blue one. The delivery note says "
     "grey. How do I swap it?"),
    ("en", "Refund for the returned {product}",
     "I sent the {product} back {days} days ago and the courier confirmed you received "
     "it, but I still have not got my money back."),
    ("en", "Someone ordered from my account",
     "There is an order {order} in my history that I did not make, shipped to {city}. "
     "I think my account was compromised."),
    ("en", "Suspicious email asking for my password",
     "I got an email that looks like yours asking me to confirm my password on a "
     "strange site. Is this phishing? I did not click anything."),
    ("en", "Feature request: dark mode",
     "Love the new dashboard! A dark mode would be nice for working late. Any plans?"),
    ("en", "Suggestion for the weekly report",
     "A small suggestion: the weekly report would be more useful with a comparison to "
     "the previous week."),
    ("en", "Do you have an office in {city}?",
     "We are a small team in {city} and would like to meet someone in person before "
     "choosing a plan. Is that possible?"),
    ("en", "Question about student discounts",
     "Is there a discount for students or schools? We are a class of {days} pupils."),
    ("de", "Rechnung {order} doppelt erhalten",
     "Guten Tag, ich habe die Rechnung {order} zweimal bekommen und bin nicht sicher, "
     "ob ich doppelt zahlen soll. Bitte um kurze Rückmeldung."),
    ("de", "Paket ist nicht angekommen",
     "Bitte helfen Sie mir: meine Bestellung {order} ist laut Tracking seit {days} Tagen "
     "unterwegs und nicht angekommen."),
    ("es", "Mi pedido {order} no ha llegado",
     "Hola, hice el pedido {order} hace {days} días y todavía no ha llegado. ¿Pueden "
     "decirme dónde está? Gracias."),
    ("es", "Quiero un reembolso del {product}",
     "Hola, devolví el {product} hace {days} días y todavía no tengo el reembolso. "
     "Gracias por revisarlo."),
    ("fr", "Problème avec ma commande {order}",
     "Bonjour, ma commande {order} est indiquée comme livrée mais je n'ai rien reçu. "
     "Merci de vérifier avec le transporteur."),
    ("fr", "Erreur lors du paiement",
     "Bonjour, le paiement de mon abonnement affiche une error 402 à chaque essai. "
     "Merci de m'aider."),
)  # fmt: skip
PRODUCTS = (
    "Kettle Pro", "TrailCam 2", "desk lamp", "StudyBuddy", "coffee grinder", "PhotoVault",
    "rowing machine", "NoteStream", "baby monitor", "air purifier", "FitBand", "TaskHive",
)  # fmt: skip
DEVICES = ("Pixel 8", "iPhone 13", "Galaxy A54", "Moto G", "iPad Air")
CITIES = ("Lisbon", "Osaka", "Leeds", "Porto Alegre", "Gdańsk", "Nairobi", "Lyon", "Austin")
MONTHS = ("January", "February", "April", "June", "August", "October", "November")
CHANNELS = ("email", "chat", "web", "phone")
PLANS = ("free", "free", "pro", "pro", "enterprise")
VARIED = 0.7  #: share of tickets the contract's relations vary further


def ticket_traffic(contract: Contract, seed: str, count: int) -> list[dict[str, Any]]:
    """Return ``count`` ticket-triage inputs drawn from ``seed`` (the same for the same seed)."""
    if contract.name != TICKET_TRIAGE:
        raise ValueError(f"only {TICKET_TRIAGE} has traffic templates, not {contract.name}")
    rng = random.Random(f"{seed}/traffic/{contract.name}")
    out: list[dict[str, Any]] = []
    while len(out) < count:
        language, subject, body = rng.choice(TEMPLATES)
        slots = {
            "order": f"{rng.choice('ABCDKM')}{rng.randrange(10_000, 99_999)}",
            "month": rng.choice(MONTHS),
            "amount": f"{rng.randrange(5, 300)}.{rng.randrange(100):02d} EUR",
            "product": rng.choice(PRODUCTS),
            "device": rng.choice(DEVICES),
            "days": str(rng.randrange(2, 30)),
            "city": rng.choice(CITIES),
        }
        given, family = person(rng)
        ticket: dict[str, Any] = {
            "ticket_id": f"{rng.choice(('SUP', 'HD', 'CS'))}-{rng.randrange(10_000, 999_999)}",
            "channel": rng.choice(CHANNELS),
            "customer": {"name": f"{given} {family}", "plan": rng.choice(PLANS)},
            "subject": subject.format(**slots),
            "body": body.format(**slots),
        }
        if rng.random() < VARIED:
            ticket = _varied(contract, ticket, language, rng)
        if not contract.validate_input(ticket):
            out.append(ticket)
    return out


def _varied(
    contract: Contract, ticket: dict[str, Any], language: str, rng: random.Random
) -> dict[str, Any]:
    """Apply one or two of the contract's relations, as a variant of a case would get."""
    relations = rng.sample(list(contract.relations), min(2, len(contract.relations)))
    for relation in relations[: rng.randrange(1, 3)]:
        varied = relation.vary(copy.deepcopy(ticket), {"language": language}, rng)
        if varied is not None:
            ticket = varied[0]
    return ticket
