"""Verify a webhook onejob sent (Standard Webhooks), with the standard library only.

::

    from onejob_client import verify_webhook, WebhookVerificationError

    try:
        event = verify_webhook(request.body, request.headers, secret)  # "whsec_..."
    except WebhookVerificationError:
        return 400
    if seen(request.headers["webhook-id"]):      # the same id on every retry
        return 204
    handle(event["type"], event["data"])          # data: the job as GET /v1/jobs/{id} shows it

The signature is ``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`` keyed by the
base64-decoded rest of the ``whsec_`` secret; during a rotation the header carries one per
secret, space-separated, and either verifies. The timestamp must be within ``tolerance``
seconds of now, so a captured request cannot be replayed later.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from onejob_client.errors import OnejobError

SECRET_PREFIX = "whsec_"
TOLERANCE = 300.0  # seconds between the webhook's timestamp and now, at most


class WebhookVerificationError(OnejobError):
    """The webhook is not onejob's: its signature, timestamp or headers do not verify."""


def _header(headers: Mapping[str, str], name: str) -> str:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    raise WebhookVerificationError(f"the {name} header is missing")


def _key(secret: str) -> bytes:
    try:
        return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except binascii.Error:
        raise WebhookVerificationError("the secret is not a whsec_ secret") from None


def sign_webhook(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """Return the ``v1,...`` signature of one message (what onejob puts in the header)."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def verify_webhook(
    body: bytes | str,
    headers: Mapping[str, str],
    secret: str | Sequence[str],
    *,
    tolerance: float = TOLERANCE,
    now: float | None = None,
) -> dict[str, Any]:
    """Check a webhook's signature and timestamp; return its JSON payload.

    ``body``: the raw body as received (not parsed and encoded again). ``secret``: the
    subscription's ``whsec_`` secret, or several (while you rotate yours, either may
    match). Raise ``WebhookVerificationError`` when it does not verify.
    """
    raw = body.encode() if isinstance(body, str) else body
    msg_id = _header(headers, "webhook-id")
    stamp_text = _header(headers, "webhook-timestamp")
    signatures = _header(headers, "webhook-signature").split()
    try:
        stamp = int(stamp_text)
    except ValueError:
        raise WebhookVerificationError("the webhook-timestamp is not a number") from None
    current = time.time() if now is None else now
    if abs(current - stamp) > tolerance:
        raise WebhookVerificationError("the webhook-timestamp is too far from now")
    secrets = [secret] if isinstance(secret, str) else list(secret)
    expected = {sign_webhook(s, msg_id, stamp, raw).encode() for s in secrets}
    given = [g.encode("utf-8", "surrogateescape") for g in signatures]
    if not any(hmac.compare_digest(e, g) for e in expected for g in given):
        raise WebhookVerificationError("no signature matches the secret")
    try:
        payload: dict[str, Any] = json.loads(raw)
    except ValueError:
        raise WebhookVerificationError("the body is not JSON") from None
    return payload
