"""Test doubles for the dispatcher's seams: a spy store, a scripted provider, a toy contract."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.domain.records import (
    AddAttemptOutcome,
    AddAttemptResult,
    AttemptRecord,
    ClaimedAttempt,
    FinalizeOutcome,
    FinalizeResult,
    JobRecord,
    TransitionOutcome,
    TransitionResult,
)
from gateway.domain.states import AttemptReason, AttemptState, JobStatus
from providers.base import ProviderRequest, ProviderResult, Usage
from providers.config import ProviderConfig

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def make_job(job_id: str = "job_1", provider: str = "p1", **kw: Any) -> JobRecord:
    base: dict[str, Any] = dict(
        id=job_id,
        owner_id="o",
        idempotency_key="k",
        fingerprint="f",
        contract="toy@1",
        provider=provider,
        requested_provider=None,
        input={"text": "hi"},
        status=JobStatus.RUNNING,
        version=1,
        completed_by=None,
        result=None,
        error=None,
        created_at=T0,
        updated_at=T0,
    )
    base.update(kw)
    return JobRecord(**base)


def make_attempt(
    number: int = 1,
    provider: str = "p1",
    *,
    job_id: str = "job_1",
    reason: AttemptReason = AttemptReason.INITIAL,
    state: AttemptState = AttemptState.RUNNING,
    deadline_at: dt.datetime | None = None,
) -> AttemptRecord:
    return AttemptRecord(
        id=f"att_{number}",
        job_id=job_id,
        number=number,
        provider=provider,
        reason=reason,
        state=state,
        read_version=1,
        lease_owner="w",
        lease_expires_at=None,
        deadline_at=deadline_at,
        downstream_key=f"{job_id}/{number}",
        provider_request_id=None,
        error=None,
        created_at=T0,
        started_at=T0,
        finished_at=None,
    )


class SpyStore:
    """Hand out queued claims and record every decision the dispatcher asks for."""

    def __init__(self) -> None:
        self.claims: list[ClaimedAttempt] = []
        self.jobs: dict[str, JobRecord] = {}
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.finalize_outcome = FinalizeOutcome.WON
        self.finalize_delay = 0.0  # seconds the CAS transaction takes (a busy database)
        self.finalize_errors: list[Exception] = []  # raised by the next finalize calls
        self.renew_result = True
        self.reapable: list[AttemptRecord] = []
        self.unknown: list[AttemptRecord] = []
        self.claim_kwargs: list[dict[str, Any]] = []
        self.extend_errors: list[Exception] = []  # raised by the next extend_deadline calls

    def named(self, name: str) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        return [(a, k) for n, a, k in self.calls if n == name]

    async def claim_next_attempt(self, worker_id: str, **kw: Any) -> ClaimedAttempt | None:
        self.claim_kwargs.append({"worker_id": worker_id, **kw})
        return self.claims.pop(0) if self.claims else None

    async def get_job(self, job_id: str, owner_id: str | None = None) -> JobRecord | None:
        return self.jobs.get(job_id)

    async def renew_lease(self, attempt_id: str, worker_id: str, *, lease_ttl: float) -> bool:
        self.calls.append(("renew_lease", (attempt_id, worker_id), {"lease_ttl": lease_ttl}))
        return self.renew_result

    async def finalize(self, attempt_id: str, result: Any, **kw: Any) -> FinalizeResult:
        await asyncio.sleep(self.finalize_delay)
        if self.finalize_errors:
            raise self.finalize_errors.pop(0)
        self.calls.append(("finalize", (attempt_id, result), kw))
        return FinalizeResult(outcome=self.finalize_outcome, attempt_id=attempt_id)

    async def fail_attempt(
        self, attempt_id: str, error: dict[str, Any], **kw: Any
    ) -> TransitionResult:
        self.calls.append(("fail_attempt", (attempt_id, error), kw))
        return TransitionResult(outcome=TransitionOutcome.DONE)

    async def mark_unknown(
        self, attempt_id: str, error: dict[str, Any], **kw: Any
    ) -> TransitionResult:
        self.calls.append(("mark_unknown", (attempt_id, error), kw))
        return TransitionResult(outcome=TransitionOutcome.DONE)

    async def add_attempt(
        self, job_id: str, provider: str, reason: AttemptReason, **kw: Any
    ) -> AddAttemptResult:
        self.calls.append(("add_attempt", (job_id, provider, reason), kw))
        return AddAttemptResult(
            outcome=AddAttemptOutcome.ADDED, attempt=make_attempt(2, provider, reason=reason)
        )

    def unavailable(self, exc: BaseException, where: str) -> bool:
        """A ``ConnectionError`` plays the database going away."""
        if isinstance(exc, ConnectionError):
            self.calls.append(("unavailable", (type(exc).__name__, where), {}))
            return True
        return False

    async def extend_deadline(
        self, attempt_id: str, worker_id: str, *, deadline_s: float, lease_ttl: float
    ) -> bool:
        self.calls.append(("extend_deadline", (attempt_id, worker_id), {"deadline_s": deadline_s}))
        if self.extend_errors:
            raise self.extend_errors.pop(0)
        return True

    def never_sent(self, attempt_id: str, worker_id: str, started_at: Any = None) -> None:
        self.calls.append(("never_sent", (attempt_id, worker_id), {}))

    async def release_unsent(self) -> list[str]:
        return []

    async def resolve(self, attempt_id: str, outcome: AttemptState, **kw: Any) -> TransitionResult:
        self.calls.append(("resolve", (attempt_id, outcome), kw))
        return TransitionResult(outcome=TransitionOutcome.CONFLICT)

    async def reap_expired_leases(self) -> list[AttemptRecord]:
        reaped, self.reapable = self.reapable, []
        return reaped

    async def list_attempts(
        self, state: AttemptState | None, *, limit: int = 100
    ) -> list[AttemptRecord]:
        return self.unknown[:limit]


MakeDispatcher = Callable[..., Any]

Behaviour = Callable[[ProviderRequest], Awaitable[ProviderResult]]


def answer(output: Any, *, delay: float = 0.0, request_id: str = "req_1") -> Behaviour:
    async def run(request: ProviderRequest) -> ProviderResult:
        await asyncio.sleep(delay)
        return ProviderResult(
            output=output,
            raw_text="",
            request_id=request_id,
            usage=Usage(),
            finish_reason="stop",
            latency=delay,
        )

    return run


def raises(exc: BaseException, *, delay: float = 0.0) -> Behaviour:
    async def run(request: ProviderRequest) -> ProviderResult:
        await asyncio.sleep(delay)
        raise exc

    return run


class ScriptedProvider:
    """A provider that plays one behaviour per call and remembers every request."""

    def __init__(self, name: str, *behaviours: Behaviour) -> None:
        self.name = name
        self.behaviours = list(behaviours)
        self.requests: list[ProviderRequest] = []

    async def call(self, request: ProviderRequest) -> ProviderResult:
        self.requests.append(request)
        behaviour = self.behaviours.pop(0) if self.behaviours else answer({"label": "ok"})
        return await behaviour(request)


@dataclasses.dataclass
class ToyContract:
    """A contract whose output must be an object with a string ``label``."""

    name: str = "toy@1"
    hedgeable: bool = True
    renders: int = 0  #: how many times ``render`` ran

    def render(self, input: Any) -> str:
        self.renders += 1
        if input == {"text": "unrenderable"}:
            raise ValueError("cannot render this input")
        return str(input)

    def provider_request(
        self,
        input: Any,
        *,
        model: str,
        timeout: float,
        idempotency_key: str | None,
        max_output_tokens: int | None = None,
        prompt: Any = None,
    ) -> ProviderRequest:
        return ProviderRequest(
            system="sys",
            user=self.render(input) if prompt is None else prompt,
            output_schema={},
            schema_name="toy",
            model=model,
            timeout=timeout,
            idempotency_key=idempotency_key,
        )

    def validate_output(self, output: Any) -> list[str]:
        if not isinstance(output, dict) or not isinstance(output.get("label"), str):
            return ["label: required string"]
        return []


@dataclasses.dataclass(frozen=True)
class FakeVerdict:
    allowed: bool
    reason: str = ""


class FixedCertifications:
    """Allow exactly the (primary, fallback) pairs given."""

    def __init__(self, *pairs: tuple[str, str]) -> None:
        self.pairs = set(pairs)
        self.asked: list[tuple[str, str, str]] = []

    def can_failover(
        self, contract: Any, primary: ProviderConfig, fallback: ProviderConfig
    ) -> FakeVerdict:
        self.asked.append((contract.name, primary.name, fallback.name))
        ok = (primary.name, fallback.name) in self.pairs
        return FakeVerdict(ok, "certified" if ok else "no certificate")


def provider_config(name: str, timeout: float = 5.0) -> ProviderConfig:
    return ProviderConfig(
        name=name,
        protocol="openai",
        base_url="http://127.0.0.1:9/v1",
        model=f"m-{name}",
        timeout=timeout,
    )
