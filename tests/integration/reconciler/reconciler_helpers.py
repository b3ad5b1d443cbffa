"""Shared helpers of the reconciler's integration tests: a job with an unknown attempt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gateway.domain.fingerprint import fingerprint
from gateway.domain.records import AttemptRecord, NewJob
from gateway.domain.states import AttemptState
from gateway.store import SqlJobStore

CONTRACT = "ticket-triage@1"
CASES = Path(__file__).resolve().parents[3] / "contracts/catalog/ticket-triage/cases.jsonl"


def case_input() -> dict[str, Any]:
    """Return the input of the first ticket-triage catalog case."""
    first = next(ln for ln in CASES.read_text(encoding="utf-8").splitlines() if ln.strip())
    data: dict[str, Any] = json.loads(first)["input"]
    return data


async def unknown_attempt(
    store: SqlJobStore, key: str = "k1", deadline_s: float = 1.0
) -> AttemptRecord:
    """Create a job whose first attempt timed out: ``unknown`` (deadline after its claim)."""
    data = case_input()
    digest = fingerprint(CONTRACT, data, None)
    new = NewJob("alice", key, digest, CONTRACT, "sim-openai", None, data)
    await store.create_or_get(new)
    claimed = await store.claim_next_attempt(
        "w1", lease_ttl=30.0, deadline_s={}, default_deadline_s=deadline_s
    )
    assert claimed is not None
    await store.mark_unknown(claimed.attempt.id, {"outcome": "unknown", "reason": "deadline"})
    attempt = await store.get_attempt(claimed.attempt.id)
    assert attempt is not None and attempt.state is AttemptState.UNKNOWN
    return attempt
