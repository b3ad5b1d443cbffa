"""What a shadow check (issue 38) reads and leaves: plain records, no rules."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from typing import Any


class ShadowOutcome(enum.StrEnum):
    """What one shadow check came to."""

    #: The call is on its way (the row claims the job for this fallback).
    PENDING = "pending"
    #: The fallback's answer keeps the contract and agrees on every must-agree field.
    AGREED = "agreed"
    #: It breaks a layer (schema, model, an invariant) or differs on a must-agree field.
    DISAGREED = "disagreed"
    #: No answer to judge (the call failed or timed out): not counted in the rate.
    ERROR = "error"


JUDGED = (ShadowOutcome.AGREED.value, ShadowOutcome.DISAGREED.value)


@dataclasses.dataclass(frozen=True, slots=True)
class ShadowCandidate:
    """A succeeded job whose primary wrote the result: what a shadow check re-runs."""

    job_id: str
    contract: str
    primary: str  #: the job's provider, whose attempt won
    input: Any
    result: Any
    finished_at: dt.datetime  #: the job's ``updated_at`` (the cursor of the scan)


@dataclasses.dataclass(frozen=True, slots=True)
class ShadowTally:
    """The judged checks of one (contract, primary, fallback) pair in a window."""

    checks: int = 0
    disagreements: int = 0
    errors: int = 0  #: calls without an answer (not in the rate)
    #: Disagreeing must-agree fields and broken layers by name, with their counts.
    fields: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def rate(self) -> float | None:
        """Return the share of judged checks that disagreed (None before any)."""
        return self.disagreements / self.checks if self.checks else None
