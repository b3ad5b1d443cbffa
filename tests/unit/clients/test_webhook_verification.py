"""The Python client's webhook check agrees with the reference ``standardwebhooks``
library and with what the gateway signs: either side's signature verifies on the other,
both secrets of a rotation verify, and a changed body, a stale timestamp, a wrong secret
or a missing header is refused."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest
from onejob_client import WebhookVerificationError, sign_webhook, verify_webhook
from standardwebhooks.webhooks import Webhook as Reference

from gateway.domain.webhooks import new_secret, signature

BODY = json.dumps({"type": "job.succeeded", "timestamp": "2026-12-07T17:00:00.000Z", "data": {}})


def headers(msg_id: str, stamp: int, sig: str) -> dict[str, str]:
    return {"webhook-id": msg_id, "webhook-timestamp": str(stamp), "webhook-signature": sig}


def test_a_signature_of_the_reference_library_verifies_here_and_back() -> None:
    secret, stamp = new_secret(), int(time.time())
    theirs = Reference(secret).sign("msg_1", dt.datetime.fromtimestamp(stamp, dt.UTC), BODY)
    assert verify_webhook(BODY, headers("msg_1", stamp, theirs), secret)["type"] == "job.succeeded"
    ours = sign_webhook(secret, "msg_1", stamp, BODY.encode())
    assert ours == theirs
    Reference(secret).verify(BODY, headers("msg_1", stamp, ours))


def test_what_the_gateway_signs_verifies_with_both_during_a_rotation() -> None:
    new, old, stamp = new_secret(), new_secret(), int(time.time())
    sig = signature((new, old), "msg_2", stamp, BODY.encode())
    for secret in (new, old):
        assert verify_webhook(BODY.encode(), headers("msg_2", stamp, sig), secret)
        Reference(secret).verify(BODY, headers("msg_2", stamp, sig))
    assert verify_webhook(BODY, headers("msg_2", stamp, sig), [new_secret(), old])


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"body": BODY.replace("succeeded", "failed")}, "no signature"),
        ({"secret": "other"}, "no signature"),
        ({"stamp": -600}, "too far"),
        ({"stamp": 600}, "too far"),
        ({"drop": "webhook-id"}, "webhook-id header is missing"),
        ({"drop": "webhook-signature"}, "webhook-signature header is missing"),
        ({"raw_stamp": "soon"}, "not a number"),
        ({"sig": "v1,é"}, "no signature"),
    ],
)
def test_anything_else_is_refused(change: dict[str, object], says: str) -> None:
    secret, stamp = new_secret(), int(time.time())
    sent = headers("msg_3", stamp, sign_webhook(secret, "msg_3", stamp, BODY.encode()))
    if "stamp" in change:
        moved = stamp + int(change["stamp"])  # type: ignore[call-overload]
        sent = headers("msg_3", moved, sign_webhook(secret, "msg_3", moved, BODY.encode()))
    if "raw_stamp" in change:
        sent["webhook-timestamp"] = str(change["raw_stamp"])
    if "sig" in change:
        sent["webhook-signature"] = str(change["sig"])
    if "drop" in change:
        del sent[str(change["drop"])]
    key = new_secret() if change.get("secret") else secret
    with pytest.raises(WebhookVerificationError, match=says):
        verify_webhook(str(change.get("body", BODY)), sent, key)


def test_header_names_are_read_in_any_case() -> None:
    secret, stamp = new_secret(), int(time.time())
    sig = sign_webhook(secret, "msg_4", stamp, BODY.encode())
    sent = {"Webhook-Id": "msg_4", "WEBHOOK-TIMESTAMP": str(stamp), "Webhook-Signature": sig}
    assert verify_webhook(BODY, sent, secret)["data"] == {}
