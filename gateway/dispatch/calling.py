"""One provider call under a deadline, classified: an answer, a definite failure, or unknown;
and the contract check every answer passes before it may decide a job."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

from gateway.domain.jsontext import find_unstorable
from gateway.domain.ports import ContractSpec, Provider
from providers.base import (
    DefiniteFailure,
    OutcomeUnknown,
    ProviderError,
    ProviderRequest,
    ProviderResult,
)

log = logging.getLogger(__name__)

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


async def call_provider(
    provider: Provider, request: ProviderRequest, deadline_s: float, log_extra: dict[str, Any]
) -> CallOutcome:
    """Call once; anything that is not a definite failure or an answer is unknown."""
    began = time.perf_counter()
    error: dict[str, Any]
    definite = False
    try:
        async with asyncio.timeout(deadline_s + DEADLINE_SLACK):
            result = await provider.call(request)
        return CallOutcome(result, None, False, time.perf_counter() - began)
    except TimeoutError:
        error = {
            "outcome": "unknown",
            "reason": "deadline",
            "message": f"no answer within {deadline_s:.1f}s",
        }
    except DefiniteFailure as exc:
        error, definite = exc.as_dict(), True
    except OutcomeUnknown as exc:
        error = exc.as_dict()
    except ProviderError as exc:  # an unclassified provider error: assume the worst
        error = {**exc.as_dict(), "outcome": "unknown"}
    except Exception as exc:  # a bug below us; the request may have left: unknown
        log.exception("provider call raised unexpectedly", extra=log_extra)
        error = {
            "outcome": "unknown",
            "reason": "unexpected_error",
            "message": f"{type(exc).__name__}: {exc}",
        }
    return CallOutcome(None, error, definite, time.perf_counter() - began)


def output_violations(contract: ContractSpec, output: Any) -> list[str]:
    """Say how an answer breaks the contract (or cannot be stored); empty when it keeps it."""
    unstorable = find_unstorable(output)
    return [f"output {unstorable}"] if unstorable else contract.validate_output(output)
