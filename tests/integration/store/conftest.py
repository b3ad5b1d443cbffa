from __future__ import annotations

from typing import Any

import pytest

from gateway.domain.fingerprint import fingerprint
from gateway.domain.records import NewJob

CONTRACT = "ticket-triage@1"


def new_job(
    owner: str = "alice", key: str = "k1", input: Any = None, provider: str = "sim-openai"
) -> NewJob:
    """Build what the service layer would hand the store."""
    input = {"text": "printer on fire"} if input is None else input
    return NewJob(
        owner_id=owner,
        idempotency_key=key,
        fingerprint=fingerprint(CONTRACT, input, None),
        contract=CONTRACT,
        provider=provider,
        requested_provider=None,
        input=input,
    )


@pytest.fixture
def make_job() -> Any:
    return new_job
