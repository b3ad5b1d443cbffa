"""OpenAI's stored completions, simulated: kept on ``store: true``, listed by metadata.

A Chat Completions request with ``store: true`` has its completion kept per simulated
provider when it is made, before it is sent: a ``delay`` past the client's deadline still
ends in a stored completion the client never read, as with the real API. ``GET
[/p/{provider}]/v1/chat/completions?metadata[KEY]=VALUE`` lists them as OpenAI does
(``order``, ``limit``, ``after``, ``model``; ``data``, ``first_id``, ``last_id``,
``has_more``): the lookup the reconciler asks (``providers.lookup``).
"""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any

from providers.base import RequestRefused
from providers.sim_wire import SimWire, WireRequest, WireResponse
from providers.simulator.asgi import plain_json
from providers.simulator.script import CallRecord

#: Completions sent with ``store: true``, per provider, oldest first.
StoredCompletions = dict[str, list[dict[str, Any]]]

LIST_DEFAULT_LIMIT = 20  # stored completions per page when the client names no limit
LIST_MAX_LIMIT = 100  # the most one page may hold
_METADATA_PARAM = re.compile(r"metadata\[([^\]]+)\]")


def keep(
    stored: StoredCompletions, record: CallRecord, request: WireRequest, response: WireResponse
) -> None:
    """Store a finished completion for the lookup, before it is sent (or lost)."""
    completion = json.loads(response.body)
    completion["metadata"] = dict(request.metadata or {})
    stored.setdefault(record.provider, []).append(completion)
    record.stored_id = str(completion["id"])


def list_stored(
    stored: StoredCompletions, provider: str, wire: SimWire, query_string: bytes
) -> WireResponse:
    """Answer ``GET /v1/chat/completions`` as OpenAI lists stored completions."""
    pairs = urllib.parse.parse_qsl(query_string.decode())
    wanted: dict[str, str] = {}
    options: dict[str, str] = {}
    for name, value in pairs:
        if m := _METADATA_PARAM.fullmatch(name):
            wanted[m.group(1)] = value
        elif name in ("after", "limit", "order", "model"):
            options[name] = value
        else:
            return _refuse(wire, f"Unrecognized request argument supplied: {name}")
    limit_text = options.get("limit", str(LIST_DEFAULT_LIMIT))
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= LIST_MAX_LIMIT:
        return _refuse(wire, f"limit must be an integer between 1 and {LIST_MAX_LIMIT}")
    order = options.get("order", "asc")
    if order not in ("asc", "desc"):
        return _refuse(wire, "order must be 'asc' or 'desc'")
    items = [
        c
        for c in stored.get(provider, [])
        if all(c["metadata"].get(k) == v for k, v in wanted.items())
        and options.get("model") in (None, c.get("model"))
    ]
    if order == "desc":
        items.reverse()
    if "after" in options:
        ids = [c["id"] for c in items]
        items = items[ids.index(options["after"]) + 1 :] if options["after"] in ids else []
    page = items[: int(limit_text)]
    return plain_json(
        200,
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > len(page),
        },
    )


def _refuse(wire: SimWire, message: str) -> WireResponse:
    return wire.error(RequestRefused(message, type="invalid_request_error"), "list")
