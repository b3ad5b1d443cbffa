"""One provider call under a deadline, classified: an answer, a definite failure, or unknown;
and the contract check every answer passes before it may decide a job."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from gateway.dispatch.log_context import log
from gateway.domain.jsontext import find_unstorable
from gateway.domain.ports import ContractSpec, Provider
from providers.base import (
    ConnectFailed,
    DefiniteFailure,
    NoCapacity,
    OutcomeUnknown,
    ProviderError,
    ProviderRequest,
    ProviderResult,
    Unavailable,
)

#: The adapter enforces the deadline itself and says how it ran out; this backstop only
#: fires if it does not, a little later.
DEADLINE_SLACK = 0.25  # seconds


@dataclasses.dataclass(frozen=True, slots=True)
class CallOutcome:
    """How one provider call ended."""

    result: ProviderResult | None  #: the answer (not yet checked against the contract)
    error: dict[str, Any] | None  #: JSON-safe description of the failure
    definite: bool  #: the provider surely did not do the work (safe to fail over)
    seconds: float  #: time spent inside the call
    #: The provider said not now (``rate_limited``, ``overloaded``): nothing was done, and
    #: the same request may go again later (issue 43); None otherwise.
    not_now: NoCapacity | None = None
    #: What the outcome says of the provider's health, for its circuit: ``failure`` (a
    #: 5xx, a refused connection), ``timeout`` (the outcome is unknown), or None.
    health: str | None = None


async def call_provider(
    provider: Provider, request: ProviderRequest, deadline_s: float
) -> CallOutcome:
    """Call once; anything that is not a definite failure or an answer is unknown."""
    began = time.perf_counter()
    error: dict[str, Any]
    definite = False
    not_now: NoCapacity | None = None
    health: str | None = "timeout"
    try:
        async with asyncio.timeout(deadline_s + DEADLINE_SLACK):
            result = await provider.call(request)
        return CallOutcome(result, None, False, time.perf_counter() - began, health=None)
    except TimeoutError:
        error = {
            "outcome": "unknown",
            "reason": "deadline",
            "message": f"no answer within {deadline_s:.1f}s",
        }
    except NoCapacity as exc:
        error, definite, not_now, health = exc.as_dict(), True, exc, exc.capacity
    except DefiniteFailure as exc:
        error, definite = exc.as_dict(), True
        health = "failure" if isinstance(exc, ConnectFailed | Unavailable) else None
    except OutcomeUnknown as exc:
        error = exc.as_dict()
    except ProviderError as exc:  # an unclassified provider error: assume the worst
        error = {**exc.as_dict(), "outcome": "unknown"}
    except Exception as exc:  # a bug below us; the request may have left: unknown
        log.exception("provider call raised unexpectedly")
        error = {
            "outcome": "unknown",
            "reason": "unexpected_error",
            "message": f"{type(exc).__name__}: {exc}",
        }
    return CallOutcome(None, error, definite, time.perf_counter() - began, not_now, health)


def output_violations(contract: ContractSpec, output: Any) -> list[str]:
    """Say how an answer breaks the contract (or cannot be stored); empty when it keeps it."""
    unstorable = find_unstorable(output)
    return [f"output {unstorable}"] if unstorable else contract.validate_output(output)
