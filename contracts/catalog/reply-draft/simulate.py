"""Rule-based answers for reply-draft@1, used by the provider simulator.

``answer`` writes the reply a careful agent would, from the facts only, in the customer's
language, shortened when the length limit asks for it. ``sloppy`` writes the same reply
but never names the order id. ``wrong_language`` writes it in English whatever language the
input asks for, and still claims the asked language in ``language``.
``misread`` (off the catalog, for the ``catalog-only`` profile) gets the next step wrong.
"""

from __future__ import annotations

from typing import Any

GREETING = {
    "en": "Hi {name},",
    "de": "Hallo {name},",
    "es": "Hola {name}:",
    "fr": "Bonjour {name},",
}
OPENING = {
    "en": "Thank you for contacting us about order {oid}.",
    "de": "vielen Dank für Ihre Nachricht zu Bestellung {oid}.",
    "es": "Gracias por escribirnos sobre el pedido {oid}.",
    "fr": "Merci pour votre message concernant la commande {oid}.",
}
SHORT_LABEL = {"en": "Order", "de": "Bestellung", "es": "Pedido", "fr": "Commande"}
SUBJECT = {
    "en": "Your order {oid}",
    "de": "Ihre Bestellung {oid}",
    "es": "Su pedido {oid}",
    "fr": "Votre commande {oid}",
}
CLOSING = {
    "en": "Kind regards,\n{agent}",
    "de": "Freundliche Grüße\n{agent}",
    "es": "Un saludo,\n{agent}",
    "fr": "Cordialement,\n{agent}",
}
STEP = {
    "eta": {
        "en": "Your parcel is on its way with {carrier} and the new delivery date is {eta}.",
        "de": "Ihr Paket ist mit {carrier} unterwegs, der neue Liefertermin ist der {eta}.",
        "es": "Su paquete está en camino con {carrier} y la nueva fecha de entrega es el {eta}.",
        "fr": (
            "Votre colis est en route avec {carrier} et la nouvelle date de livraison est le {eta}."
        ),
    },
    "investigating": {
        "en": "We have asked {carrier} to trace it and will write to you as soon as we hear back.",
        "de": (
            "Wir haben {carrier} um eine Nachforschung gebeten und "
            "melden uns, sobald wir Antwort haben."
        ),
        "es": (
            "Hemos pedido a {carrier} que lo localice y le escribiremos "
            "en cuanto tengamos respuesta."
        ),
        "fr": (
            "Nous avons demandé à {carrier} de le localiser et vous "
            "écrirons dès que nous aurons une réponse."
        ),
    },
    "replacement_sent": {
        "en": "We have shipped a replacement to you.",
        "de": "Wir haben Ihnen einen Ersatz geschickt.",
        "es": "Le hemos enviado un reemplazo.",
        "fr": "Nous vous avons expédié un article de remplacement.",
    },
    "return_label_sent": {
        "en": "We have emailed you a prepaid return label.",
        "de": "Wir haben Ihnen ein vorfrankiertes Rücksendeetikett per E-Mail geschickt.",
        "es": "Le hemos enviado por correo una etiqueta de devolución prepagada.",
        "fr": "Nous vous avons envoyé par e-mail une étiquette de retour prépayée.",
    },
    "refund_issued": {
        "en": "We have refunded {amount} {currency} to your original payment method.",
        "de": "Wir haben {amount} {currency} auf Ihre ursprüngliche Zahlungsart erstattet.",
        "es": "Le hemos reembolsado {amount} {currency} en su método de pago original.",
        "fr": "Nous vous avons remboursé {amount} {currency} sur votre moyen de paiement initial.",
    },
    "none": {
        "en": "The order has already shipped, so it can no longer be cancelled.",
        "de": "Die Bestellung wurde bereits versandt und kann nicht mehr storniert werden.",
        "es": "El pedido ya se ha enviado y no se puede cancelar.",
        "fr": "La commande est déjà expédiée et ne peut plus être annulée.",
    },
}
DEFAULT_CARRIER = {
    "en": "the carrier",
    "de": "den Paketdienst",
    "es": "la empresa de transporte",
    "fr": "le transporteur",
}


def next_step(input: dict[str, Any]) -> str:
    """Decide what happens next from the facts alone."""
    facts = input["facts"]
    issue = input["issue"]
    if issue == "late_delivery":
        return "none" if "new_eta" in facts else "investigating"
    if "refund_amount" in facts and (issue != "cancellation" or facts.get("cancellable")):
        return "refund_issued"
    if facts.get("replacement_shipped"):
        return "replacement_sent"
    if facts.get("return_label"):
        return "return_label_sent"
    if issue == "cancellation" and facts.get("cancellable") is False:
        return "none"
    return "investigating"


def _step_sentence(input: dict[str, Any], step: str) -> str:
    lang, facts = input["language"], input["facts"]
    key = "eta" if (step == "none" and input["issue"] == "late_delivery") else step
    amount = f"{facts.get('refund_amount', 0):.2f}"
    if lang != "en":
        amount = amount.replace(".", ",")
    return STEP[key][lang].format(
        carrier=facts.get("carrier", DEFAULT_CARRIER[lang]),
        eta=facts.get("new_eta", ""),
        amount=amount,
        currency=facts.get("currency", ""),
    )


def answer(input: dict[str, Any]) -> dict[str, Any]:
    """Draft the reply like a careful agent would."""
    lang, oid = input["language"], input["order_id"]
    step = next_step(input)
    greeting = GREETING[lang].format(name=input["customer_name"])
    closing = CLOSING[lang].format(agent=input["agent_name"])
    sentence = _step_sentence(input, step)
    body = f"{greeting}\n\n{OPENING[lang].format(oid=oid)} {sentence}\n\n{closing}"
    if len(body) > input["max_chars"]:
        body = f"{greeting}\n\n{SHORT_LABEL[lang]} {oid}: {sentence}\n\n{closing}"
    return {
        "subject": SUBJECT[lang].format(oid=oid),
        "body": body,
        "language": lang,
        "next_step": step,
    }


def sloppy(input: dict[str, Any]) -> dict[str, Any]:
    """Draft the same reply but leave the order id out of it."""
    out = answer(input)
    oid = input["order_id"]
    out["subject"] = out["subject"].replace(f" {oid}", "")
    out["body"] = out["body"].replace(f" {oid}", "")
    return out


def wrong_language(input: dict[str, Any]) -> dict[str, Any]:
    """Draft the reply in English, but claim the language the input asked for."""
    out = answer({**input, "language": "en"})
    out["language"] = input["language"]
    return out


def misread(input: dict[str, Any]) -> dict[str, Any]:
    """Answer off the catalog as a model tuned on it would: the next step (must agree) wrong."""
    out = answer(input)
    out["next_step"] = "none" if out["next_step"] == "investigating" else "investigating"
    return out
