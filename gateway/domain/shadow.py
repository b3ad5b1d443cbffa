"""Shadow checks (issue 38) as plain rules: which jobs are sampled, how many calls an hour
may take, and when a pair's disagreement rate suspends its failover (the records they
work on: ``shadow_records``).

No I/O here: ``gateway.shadow`` runs the checks, ``gateway.store.shadow`` keeps them.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import hashlib
import json
from typing import Any

from gateway.domain.ports import Clock
from gateway.domain.shadow_records import ShadowTally

HOUR = 3600.0  # seconds
UNIT = float(1 << 64)  #: the sample hash, read as an integer, divided by this: [0, 1)


@dataclasses.dataclass(frozen=True, slots=True)
class Judgement:
    """Whether a tally suspends its pair, and why."""

    suspend: bool
    reason: str


def judge(tally: ShadowTally, *, threshold: float, min_samples: int) -> Judgement:
    """Suspend once ``min_samples`` checks were judged and the rate reached ``threshold``."""
    rate = tally.rate
    if rate is None or tally.checks < min_samples:
        return Judgement(False, f"{tally.checks} of {min_samples} checks needed")
    if rate >= threshold:
        return Judgement(
            True,
            f"disagreed in {tally.disagreements} of {tally.checks} ({rate:.0%} >= {threshold:.0%})",
        )
    return Judgement(False, f"disagreed in {tally.disagreements} of {tally.checks} ({rate:.0%})")


def sampled(job_id: str, fallback: str, rate: float) -> bool:
    """Say whether a job is re-run on ``fallback``: the same answer in every process."""
    if rate <= 0:
        return False
    if rate >= 1:
        return True
    digest = hashlib.sha256(f"{job_id}\x00{fallback}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / UNIT < rate


def value_hash(value: Any) -> str:
    """Return a short hash of a JSON value: reports say that two values differ, not what."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class CallBudget:
    """How many shadow calls this process may send now: a rate and an hourly budget.

    ``per_hour`` bounds the calls of the last hour over every process (the store counts
    them: ``recent`` in ``wait``) and this process's own (a sliding window, should the
    count lag); ``min_interval`` spaces this process's calls.
    """

    def __init__(self, clock: Clock, *, per_hour: int, min_interval: float) -> None:
        self.clock = clock
        self.per_hour = per_hour
        self.min_interval = min_interval
        self._sent: collections.deque[dt.datetime] = collections.deque()

    def _forget_old(self) -> None:
        cutoff = self.clock.now() - dt.timedelta(seconds=HOUR)
        while self._sent and self._sent[0] <= cutoff:
            self._sent.popleft()

    @property
    def sent_last_hour(self) -> int:
        """Return this process's calls of the last hour."""
        self._forget_old()
        return len(self._sent)

    def exhausted(self, recent: int = 0) -> bool:
        """Say whether the hour's budget is spent (``recent``: every process's calls)."""
        return max(recent, self.sent_last_hour) >= self.per_hour

    def wait(self) -> float:
        """Return the seconds until this process may send its next call (0: now)."""
        if not self._sent or self.min_interval <= 0:
            return 0.0
        since = (self.clock.now() - self._sent[-1]).total_seconds()
        return max(0.0, self.min_interval - since)

    def took(self) -> None:
        """Count one call sent now."""
        self._sent.append(self.clock.now())
