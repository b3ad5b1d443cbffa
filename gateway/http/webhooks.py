"""The webhook routes (issue 45): ``/v1/webhooks`` and below, for the key's owner."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.di import NamedDependency
from litestar.handlers import HTTPRouteHandler
from litestar.params import FromPath, QueryParameter

from gateway.domain.records import Principal
from gateway.domain.webhooks import Delivery, Webhook
from gateway.http.openapi import CURSOR_PATTERN, answer, body_doc, problems
from gateway.http.request_bodies import read_body
from gateway.http.schemas import Strict
from gateway.http.views import timestamp
from gateway.service import JobService
from gateway.service.webhooks import DELIVERIES_PAGE, MAX_DELIVERIES_PAGE

#: A deliveries' paging cursor: a delivery id (``msg_`` and a ULID) in unpadded base64url,
#: made as a jobs' cursor is (``msg`` is ``bXNn`` where ``job`` is ``am9i``).
DELIVERY_CURSOR_PATTERN = CURSOR_PATTERN.replace("^am9i", "^bXNn", 1)
#: ``limit``: plain decimal digits 1-100, as the jobs' (documented as the integer it is).
DELIVERIES_LIMIT = QueryParameter(
    pattern=r"^(?:[1-9][0-9]?|100)$",
    description=f"Deliveries on a page (default {DELIVERIES_PAGE}).",
    schema_extra={
        "one_of": None,
        "pattern": None,
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_DELIVERIES_PAGE,
        "default": DELIVERIES_PAGE,
    },
)

Caller = NamedDependency[Principal]


class WebhookBody(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /v1/webhooks``: where to send which events."""

    #: An http(s) URL; a private or loopback host only if ``[webhooks] allow_hosts`` lists it.
    url: str
    #: Some of ``job.succeeded``, ``job.failed``, ``job.cancelled``, ``attempt.unknown``.
    events: list[str]


class WebhookView(Strict):
    """A subscription (its secret is shown only when made or rotated)."""

    id: str
    url: str
    events: list[str]
    #: Every owner's jobs (made with the admin scope), or only the owner's.
    all_owners: bool
    created_at: str
    disabled_at: str | None
    #: Why deliveries stopped: ``gone`` (the endpoint answered 410).
    disabled_reason: str | None
    #: While a rotation's window lasts, the previous secret signs too, until then.
    previous_secret_until: str | None


class WebhookSecret(Strict):
    """A subscription just made or rotated, with its secret (shown this once)."""

    id: str
    url: str
    events: list[str]
    secret: str


class WebhookList(Strict):
    webhooks: list[WebhookView]


class DeliveryView(Strict):
    """One event sent, or to be sent, to a subscription, with its last outcome."""

    #: The ``webhook-id`` header, the same on every retry and redelivery.
    id: str
    type: str
    job_id: str | None
    #: ``pending``, ``delivered`` or ``failed``.
    status: str
    tries: int
    next_at: str | None
    #: The endpoint's last HTTP status, or null (no answer).
    last_status: int | None
    last_error: str | None
    created_at: str
    delivered_at: str | None
    payload: dict[str, Any]


class DeliveryList(Strict):
    deliveries: list[DeliveryView]
    #: Pass as ``cursor`` for the next page; ``null``: this was the last.
    next_cursor: str | None


def webhook_view(hook: Webhook) -> dict[str, Any]:
    """Describe a subscription, without its secret."""
    return {
        "id": hook.id,
        "url": hook.url,
        "events": list(hook.events),
        "all_owners": hook.all_owners,
        "created_at": timestamp(hook.created_at),
        "disabled_at": timestamp(hook.disabled_at),
        "disabled_reason": hook.disabled_reason,
        "previous_secret_until": timestamp(hook.previous_until) if hook.previous_secret else None,
    }


def secret_view(hook: Webhook) -> dict[str, Any]:
    """Describe a subscription with its secret."""
    return {"id": hook.id, "url": hook.url, "events": list(hook.events), "secret": hook.secret}


def delivery_view(d: Delivery) -> dict[str, Any]:
    """Describe a delivery and its last outcome."""
    return {
        "id": d.id,
        "type": d.type,
        "job_id": d.job_id,
        "status": d.status.value,
        "tries": d.tries,
        "next_at": timestamp(d.next_at),
        "last_status": d.last_status,
        "last_error": d.last_error,
        "created_at": timestamp(d.created_at),
        "delivered_at": timestamp(d.delivered_at),
        "payload": d.payload,
    }


def _service(request: Request[Any, Any, Any]) -> JobService:
    service: JobService = request.app.state.service
    return service


@post(
    "/webhooks",
    status_code=201,
    dependencies=body_doc(WebhookBody),
    responses={
        201: answer(WebhookSecret, "Made; the secret is shown this once"),
        **problems(400, 413, 422),
    },
)
async def create_webhook(request: Request[Any, Any, Any], principal: Caller) -> Response[Any]:
    """Subscribe a URL to events of the caller's jobs (every owner's with the admin scope)."""
    body = await read_body(request, WebhookBody)
    hook = await _service(request).create_webhook(principal, body.url, body.events)
    return Response(content=secret_view(hook), status_code=201)


@get("/webhooks", responses={200: answer(WebhookList, "The caller's webhooks"), **problems()})
async def list_webhooks(request: Request[Any, Any, Any], principal: Caller) -> Response[Any]:
    """List the caller's webhooks, oldest first."""
    hooks = await _service(request).list_webhooks(principal)
    return Response(content={"webhooks": [webhook_view(h) for h in hooks]})


@delete("/webhooks/{webhook_id:str}", status_code=204, responses=problems(404))
async def delete_webhook(
    request: Request[Any, Any, Any], principal: Caller, webhook_id: FromPath[str]
) -> None:
    """Delete a webhook: nothing more is sent to it."""
    await _service(request).delete_webhook(principal, webhook_id)


@post(
    "/webhooks/{webhook_id:str}/rotate",
    status_code=200,
    responses={200: answer(WebhookSecret, "The new secret, shown this once"), **problems(404)},
)
async def rotate_webhook(
    request: Request[Any, Any, Any], principal: Caller, webhook_id: FromPath[str]
) -> Response[Any]:
    """Give a webhook a new secret; the old one signs too for ``[webhooks] rotation_window``."""
    return Response(
        content=secret_view(await _service(request).rotate_webhook(principal, webhook_id))
    )


@post(
    "/webhooks/{webhook_id:str}/test",
    status_code=202,
    responses={202: answer(DeliveryView, "A test event, to be sent"), **problems(404)},
)
async def test_webhook(
    request: Request[Any, Any, Any], principal: Caller, webhook_id: FromPath[str]
) -> Response[Any]:
    """Send a ``webhook.test`` event to a webhook."""
    delivery = await _service(request).test_webhook(principal, webhook_id)
    return Response(content=delivery_view(delivery), status_code=202)


@get(
    "/webhooks/{webhook_id:str}/deliveries",
    responses={200: answer(DeliveryList, "A page of its deliveries"), **problems(400, 404)},
)
async def webhook_deliveries(
    request: Request[Any, Any, Any],
    principal: Caller,
    webhook_id: FromPath[str],
    limit: Annotated[str | None, DELIVERIES_LIMIT] = None,
    cursor: Annotated[str | None, QueryParameter(pattern=DELIVERY_CURSOR_PATTERN)] = None,
) -> Response[Any]:
    """List a webhook's deliveries, newest first, with their outcomes, a page at a time."""
    found, next_cursor = await _service(request).webhook_deliveries(
        principal, webhook_id, limit=int(limit or DELIVERIES_PAGE), cursor=cursor
    )
    return Response(
        content={"deliveries": [delivery_view(d) for d in found], "next_cursor": next_cursor}
    )


@post(
    "/webhooks/{webhook_id:str}/deliveries/{delivery_id:str}/redeliver",
    status_code=202,
    responses={202: answer(DeliveryView, "To be sent again"), **problems(404)},
)
async def redeliver(
    request: Request[Any, Any, Any],
    principal: Caller,
    webhook_id: FromPath[str],
    delivery_id: FromPath[str],
) -> Response[Any]:
    """Send a delivery again now, with the same ``webhook-id``."""
    again = await _service(request).redeliver(principal, webhook_id, delivery_id)
    return Response(content=delivery_view(again), status_code=202)


def webhook_handlers(allow: Any) -> list[HTTPRouteHandler]:
    """Return the webhook routes, with ``allow``'s OPTIONS for the path with two methods."""
    return [
        allow("/webhooks", create_webhook, list_webhooks),
        create_webhook,
        list_webhooks,
        delete_webhook,
        rotate_webhook,
        test_webhook,
        webhook_deliveries,
        redeliver,
    ]
