"""Webhook subscriptions (issue 45): make, list, delete and rotate them, send a test event,
show and redeliver their deliveries. A subscription is its owner's; one made with the
admin scope hears of every owner's jobs."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from gateway.domain.records import Principal
from gateway.domain.webhooks import (
    EVENT_TYPES,
    TEST_EVENT,
    Delivery,
    NewDelivery,
    Webhook,
    payload_time,
)
from gateway.errors import BadRequest, InvalidInput, NotFound
from gateway.service.base import ServiceBase, check_id
from gateway.webhooks.destinations import refused

MAX_WEBHOOKS = 100  # live subscriptions of one owner, at most
DELIVERIES_PAGE = 20  # deliveries on a page unless the caller asks for another number
MAX_DELIVERIES_PAGE = 100  # deliveries on a page, at most


class Webhooks(ServiceBase):
    """The webhook use cases."""

    async def create_webhook(
        self, principal: Principal, url: str, events: Sequence[str]
    ) -> Webhook:
        """Subscribe ``url`` to ``events``; the answer holds the secret, shown this once."""
        errors = [f"unknown event {e!r}" for e in events if e not in EVENT_TYPES]
        if not events:
            errors.append(f"events must name at least one of {', '.join(EVENT_TYPES)}")
        if len(set(events)) != len(events):
            errors.append("events names an event twice")
        if errors:
            raise InvalidInput(errors=errors)
        why = await refused(url, self.settings.webhooks.allow_hosts)
        if why is not None:
            raise InvalidInput(f"This url may not receive webhooks: {why}.", errors=[why])
        if len(await self.store.list_webhooks(principal.owner_id)) >= MAX_WEBHOOKS:
            raise InvalidInput(f"An owner may have {MAX_WEBHOOKS} webhooks at most.")
        return await self.store.create_webhook(
            principal.owner_id, url, events, all_owners=principal.is_admin
        )

    async def list_webhooks(self, principal: Principal) -> list[Webhook]:
        """Return the caller's live subscriptions, oldest first."""
        return await self.store.list_webhooks(principal.owner_id)

    async def get_webhook(self, principal: Principal, webhook_id: str) -> Webhook:
        """Return one of the caller's live subscriptions."""
        check_id(webhook_id, "webhook")
        hook = await self.store.get_webhook(webhook_id, principal.owner_id)
        if hook is None:
            raise NotFound(f"No webhook {webhook_id!r}.")
        return hook

    async def delete_webhook(self, principal: Principal, webhook_id: str) -> None:
        """Delete one of the caller's subscriptions: nothing more is sent to it."""
        check_id(webhook_id, "webhook")
        if not await self.store.delete_webhook(webhook_id, principal.owner_id):
            raise NotFound(f"No webhook {webhook_id!r}.")

    async def rotate_webhook(self, principal: Principal, webhook_id: str) -> Webhook:
        """Give a subscription a new secret; both sign during ``[webhooks] rotation_window``."""
        check_id(webhook_id, "webhook")
        window = self.settings.webhooks.rotation_window
        hook = await self.store.rotate_webhook_secret(webhook_id, principal.owner_id, window=window)
        if hook is None:
            raise NotFound(f"No webhook {webhook_id!r}.")
        return hook

    async def test_webhook(self, principal: Principal, webhook_id: str) -> Delivery:
        """Send a ``webhook.test`` event to one of the caller's subscriptions."""
        hook = await self.get_webhook(principal, webhook_id)
        payload = {
            "type": TEST_EVENT,
            "timestamp": payload_time(dt.datetime.now(dt.UTC)),
            "data": {"webhook_id": hook.id, "url": hook.url},
        }
        return await self.store.add_delivery(hook.id, NewDelivery(None, TEST_EVENT, None, payload))

    async def webhook_deliveries(
        self,
        principal: Principal,
        webhook_id: str,
        *,
        limit: int = DELIVERIES_PAGE,
        cursor: str | None = None,
    ) -> tuple[list[Delivery], str | None]:
        """Return a page of a subscription's deliveries, newest first, with their outcomes,
        and the cursor of the next page (None: the last), as jobs are listed."""
        check_id(webhook_id, "webhook")
        if not 1 <= limit <= MAX_DELIVERIES_PAGE:
            raise BadRequest(f"limit must be between 1 and {MAX_DELIVERIES_PAGE}.")
        try:
            found = await self.store.list_deliveries(
                webhook_id, principal.owner_id, limit=limit, cursor=cursor
            )
        except ValueError as exc:
            raise BadRequest("The cursor is not valid.") from exc
        if found is None:
            raise NotFound(f"No webhook {webhook_id!r}.")
        return found

    async def redeliver(self, principal: Principal, webhook_id: str, delivery_id: str) -> Delivery:
        """Send a delivery again now, with the same ``webhook-id``."""
        check_id(webhook_id, "webhook")
        check_id(delivery_id, "delivery")
        again = await self.store.redeliver(webhook_id, delivery_id, principal.owner_id)
        if again is None:
            raise NotFound(f"No delivery {delivery_id!r} of webhook {webhook_id!r}.")
        return again
