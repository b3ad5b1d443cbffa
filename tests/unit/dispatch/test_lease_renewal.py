"""The lease renewal's log: a lease gone after the call returned is the normal path.

Before, every timeout logged ``attempt outcome unknown`` and then a WARNING ``lease lost
while the call is in flight`` (the renewal that raced the ``unknown`` found the lease
cleared by it), which reads like a crash (issue 47, item 8).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from dispatch_fakes import make_attempt

from gateway.dispatch.lease import LeaseRenewal


class LeaseGone:
    """A store whose renewals find the lease gone."""

    def __init__(self) -> None:
        self.renewals = 0
        self.renewed = asyncio.Event()

    async def renew_lease(self, attempt_id: str, worker_id: str, *, lease_ttl: float) -> bool:
        self.renewals += 1
        self.renewed.set()
        return False

    def unavailable(self, exc: BaseException, what: str) -> bool:
        return False


async def renew_once(returned: bool) -> LeaseGone:
    store = LeaseGone()
    renewal = LeaseRenewal(store, "w1", 0.03, make_attempt())  # type: ignore[arg-type]
    if returned:
        renewal.call_returned()
    await asyncio.wait_for(store.renewed.wait(), 5)
    await asyncio.sleep(0.05)  # the turn after it: a renewal that went on would be due
    await renewal.stop()
    return store


@pytest.mark.parametrize(("returned", "warned"), [(False, True), (True, False)])
async def test_a_lease_lost_is_a_warning_only_while_the_call_is_out(
    caplog: pytest.LogCaptureFixture, returned: bool, warned: bool
) -> None:
    with caplog.at_level(logging.DEBUG, logger="gateway.dispatcher"):
        store = await renew_once(returned)
    warnings: list[Any] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert store.renewals == 1  # a lease found gone is not renewed again
    assert bool(warnings) is warned, [r.getMessage() for r in caplog.records]
