"""``[webhooks]``: where deliveries may go and how they are retried (issue 45)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: Seconds after each failed try before the next: 11 retries over about three days
#: (Standard Webhooks' recommended shape, stretched as issue 45 asks).
DEFAULT_RETRY_SCHEDULE = (
    5.0,
    300.0,
    1800.0,
    7200.0,
    18000.0,
    36000.0,
    36000.0,
    43200.0,
    43200.0,
    43200.0,
    43200.0,
)


class WebhooksConfig(BaseModel):
    """Webhook deliveries: allowed private hosts, the retry schedule, the pace."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Hosts (as written in the URL: a name or an address) a subscription may name even
    #: though they are, or resolve to, private or loopback addresses.
    allow_hosts: tuple[str, ...] = ()
    #: Seconds before each retry of a failed delivery; after the last, it has failed.
    retry_schedule: tuple[float, ...] = Field(default=DEFAULT_RETRY_SCHEDULE, min_length=1)
    #: Seconds after which a gap in the audit trail's ids is settled (docs/decisions.md).
    settle: float = Field(default=120.0, gt=0)
    #: Seconds the previous secret still signs after a rotation.
    rotation_window: float = Field(default=86400.0, ge=0)
    interval: float = Field(default=1.0, gt=0)  # seconds between two passes of a process
    timeout: float = Field(default=15.0, gt=0)  # seconds one delivery request may take
    batch: int = Field(default=50, ge=1, le=1000)  # deliveries sent per pass at most

    @property
    def lease(self) -> float:
        """Seconds a claimed delivery is not due again (longer than one request)."""
        return self.timeout + 30.0
