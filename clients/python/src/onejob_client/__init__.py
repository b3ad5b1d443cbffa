"""onejob's Python client: one Idempotency-Key per intention, retries that are safe.

::

    from onejob_client import Client, Intention

    intention = Intention.new("ticket-triage@1", {...})   # the key is made here, once
    store(intention.to_json())                            # before the first request
    with Client("http://127.0.0.1:8000", api_key=KEY) as onejob:
        job = onejob.run(intention, timeout=60)           # create (or find again), wait
"""

from __future__ import annotations

from onejob_client.async_client import AsyncClient
from onejob_client.client import Client
from onejob_client.errors import (
    AttemptInProgress,
    FallbackNotCertified,
    Forbidden,
    InvalidInput,
    InvalidKey,
    JobClosed,
    KeyReused,
    NotFound,
    OnejobError,
    ProblemError,
    QueueFull,
    StreamUnsupported,
    Unauthorized,
    Unavailable,
    UnknownContract,
    UnknownProvider,
)
from onejob_client.intention import Intention, new_key
from onejob_client.jobs import (
    Attempt,
    AttemptAdded,
    AttemptState,
    CapacityWait,
    Created,
    FallbackOutcome,
    Job,
    JobStatus,
    StillInProgress,
    is_decided,
    is_settled,
)
from onejob_client.protocol import VERSION as __version__
from onejob_client.retry import RetryPolicy
from onejob_client.sse import ServerSentEvent, SSEDecoder
from onejob_client.webhooks import WebhookVerificationError, sign_webhook, verify_webhook

__all__ = [
    "AsyncClient",
    "Attempt",
    "AttemptAdded",
    "AttemptInProgress",
    "AttemptState",
    "CapacityWait",
    "Client",
    "Created",
    "FallbackNotCertified",
    "FallbackOutcome",
    "Forbidden",
    "Intention",
    "InvalidInput",
    "InvalidKey",
    "Job",
    "JobClosed",
    "JobStatus",
    "KeyReused",
    "NotFound",
    "OnejobError",
    "ProblemError",
    "QueueFull",
    "RetryPolicy",
    "SSEDecoder",
    "ServerSentEvent",
    "StillInProgress",
    "StreamUnsupported",
    "Unauthorized",
    "Unavailable",
    "UnknownContract",
    "UnknownProvider",
    "WebhookVerificationError",
    "__version__",
    "is_decided",
    "is_settled",
    "new_key",
    "sign_webhook",
    "verify_webhook",
]
