"""The use cases a client or an admin drives: framework-free, one module per use case.

| module | use case |
|---|---|
| ``jobs`` | R1, R2: create a job for an API key's owner (or replay it); read jobs back |
| ``attempts`` | R4, R6: a manual attempt; cancel a job; list and resolve attempts (admin) |
| ``waiting`` | ``Prefer: wait``: answer once the job is settled, or at a deadline |
| ``following`` | the event stream: a job's events and changes as they come, until done |
| ``about`` | the contracts and their routes, the failover matrix, the metrics |
| ``webhooks`` | webhook subscriptions, their test events and deliveries (issue 45) |
| ``base`` | what they all stand on: the dependencies, the caller's job, the admin check |

Request problems raise ``gateway.errors``; business outcomes (replayed, conflict, blocked,
closed) come back as the store's result values. The HTTP layer maps both in one place.
"""

from __future__ import annotations

from gateway.service.about import About
from gateway.service.attempts import Attempts
from gateway.service.base import NoCertifications
from gateway.service.following import Following
from gateway.service.jobs import Jobs
from gateway.service.waiting import MAX_WAIT, Waiting
from gateway.service.webhooks import Webhooks

__all__ = ["MAX_WAIT", "JobService", "NoCertifications"]


class JobService(Jobs, Attempts, Waiting, Following, About, Webhooks):
    """Create and follow jobs, request attempts, cancel, and resolve unknown attempts."""
