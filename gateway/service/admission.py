"""Who may queue a job, and where in line (issue 43): admission and owners' fair places.

**Admission.** Creating a job stays fast however long the queue grows, until the queue
(unsent attempts of every process: queued, or waiting for capacity) reaches ``[admission]
max_queued``; then a new job is refused with 503 ``urn:onejob:queue-full`` and a
``Retry-After``, and nothing is written. A replay is still answered: the key's job is
looked up first. The depth is counted once a second by each process (``QueueWatch``),
never per request.

**Fair places.** Runners claim the queue in ``ready_at`` order. A job's first attempt is
queued at its creation time, plus its owner's spacing: an owner's jobs created in a burst
are spread ``SPACING`` seconds apart in line (at most ``HORIZON`` ahead), so another
owner's job, queued meanwhile, goes between them instead of behind all of them. Nothing
is delayed by it: a place in line only orders the queue, and an attempt is claimed as
soon as a runner and its provider can take it. The spacing is counted per process (a
process knows its own creations only), by owner once the API key's owner is known, by
the key before.
"""

from __future__ import annotations

import hashlib

from gateway.settings import AdmissionConfig

#: Seconds between an owner's jobs in line: one a second, so a burst of one owner's jobs
#: lets another owner's job in ahead of all but the first few.
SPACING = 1.0
#: The furthest ahead in line an owner's job is placed (seconds).
HORIZON = 600.0
#: Owners remembered at most; past it the ones whose spacing has run out are forgotten.
OWNERS_KEPT = 10_000


class QueueAdmission:
    """Whether a new job may be queued: the queue's depth, as last counted."""

    def __init__(self, config: AdmissionConfig) -> None:
        self.config = config
        self.depth = 0  #: unsent attempts, every process, at the last count
        #: The same count by provider and state (``starting``, ``waiting``).
        self.by_provider: dict[str, dict[str, int]] = {}

    @property
    def full(self) -> bool:
        """Say whether new jobs are refused now."""
        return bool(self.config.max_queued) and self.depth >= self.config.max_queued

    def counted(self, depth: dict[str, dict[str, int]]) -> None:
        """Take a new count of the queue, by provider and state."""
        self.by_provider = depth
        self.depth = sum(n for states in depth.values() for n in states.values())


class FairPlaces:
    """Each owner's next place in the claim queue (module docstring)."""

    def __init__(self) -> None:
        self._next: dict[str, float] = {}  #: owner (or key) -> its next free place
        self._owners: dict[bytes, str] = {}  #: an API key's digest -> its owner

    def place(self, secret: str, now: float) -> float:
        """Seconds after ``now`` the new job of the key ``secret`` takes its place in line."""
        who = self._who(secret)
        free = self._next.get(who, now)
        delay = max(0.0, free - now)
        self._next[who] = min(max(free, now) + SPACING, now + HORIZON)
        if len(self._next) > OWNERS_KEPT:
            self._forget(now)
        return delay

    def owner_is(self, secret: str, owner: str) -> None:
        """The key ``secret`` belongs to ``owner``: count its jobs as the owner's."""
        digest = _digest(secret)
        if self._owners.get(digest) == owner:
            return
        if len(self._owners) > OWNERS_KEPT:
            self._owners.clear()
        self._owners[digest] = owner
        key, who = "key:" + digest.hex(), "owner:" + owner
        if key in self._next:  # what the key was spaced by goes on as the owner's
            self._next[who] = max(self._next.pop(key), self._next.get(who, 0.0))

    def _who(self, secret: str) -> str:
        digest = _digest(secret)
        owner = self._owners.get(digest)
        return "key:" + digest.hex() if owner is None else "owner:" + owner

    def _forget(self, now: float) -> None:
        self._next = {who: free for who, free in self._next.items() if free > now}


def _digest(secret: str) -> bytes:
    return hashlib.blake2b(secret.encode(), digest_size=16).digest()
