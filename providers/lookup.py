"""Asking a provider, after the fact, whether it did an attempt's work (the reconcile seam).

An adapter whose provider keeps what it answered (OpenAI stored chat completions) offers
``lookup(downstream_key)`` (the ``Reconcilable`` seam of ``gateway.domain.ports``). What
the answer proves:

- a ``StoredAnswer``: the provider did the work under that key; its answer is attached
  (parsed, or the definite failure parsing it raised: a refusal, a truncation, not JSON);
- ``None``: the provider holds nothing under that key *now*. That is not proof that the
  work was not done: storing may lag, a store may have been switched off or purged;
- ``LookupFailed``: the question was not answered; nothing is learned.
"""

from __future__ import annotations

import dataclasses

from providers.base import DefiniteFailure, ProviderError, ProviderResult


@dataclasses.dataclass(frozen=True, slots=True)
class StoredAnswer:
    """A completion the provider stored under an attempt's downstream key."""

    completion_id: str  #: the provider's id of the stored completion (the evidence)
    created: float | None  #: when the provider says it made it (unix seconds)
    matches: int  #: how many stored completions carry the key (the first one is used)
    result: ProviderResult | None  #: the parsed answer (not yet checked against the contract)
    failure: DefiniteFailure | None = None  #: why the stored answer is unusable, if it is


class LookupFailed(ProviderError):
    """The provider could not be asked (transport error, error status, unreadable list)."""

    outcome = "unknown"
    reason = "lookup_failed"
