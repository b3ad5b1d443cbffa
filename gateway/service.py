"""The use cases a client or an admin drives: framework-free, one method per use case.

Request problems raise ``gateway.errors``; business outcomes (replayed, conflict, blocked,
closed) come back as the store's result values. The HTTP layer maps both in one place.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections.abc import Coroutine, Mapping
from typing import Any

from gateway.dispatch.routing import Routes
from gateway.domain.fingerprint import UnfingerprintableInput, fingerprint
from gateway.domain.ports import (
    ApiKeys,
    Certifications,
    ContractSpec,
    JobStore,
    KeyedCreation,
    LocalRunner,
    Verdict,
)
from gateway.domain.records import (
    AddAttemptOutcome,
    AddAttemptResult,
    AttemptRecord,
    ClaimSpec,
    CreateOutcome,
    CreateResult,
    EventRecord,
    JobRecord,
    NewJob,
    Principal,
    TransitionOutcome,
    TransitionResult,
)
from gateway.domain.states import AttemptReason, AttemptState, JobStatus
from gateway.errors import (
    BadRequest,
    FallbackNotCertified,
    Forbidden,
    InvalidInput,
    NotFound,
    Unauthorized,
    UnknownContract,
    UnknownProvider,
)
from gateway.metrics import Metrics
from gateway.notify import ChangeHub
from gateway.settings import Settings
from providers.config import ProviderConfig

MAX_WAIT = 60.0  # seconds, the longest ``Prefer: wait`` honoured
WAIT_POLL_INTERVAL = 1.0  # seconds; re-read even without a wake-up (other processes, SQLite)
MAX_PAGE = 100  # jobs per page
#: What refusing an unknown or revoked API key says (``require_key``).
KEY_REFUSED = "The API key is not valid or was revoked."
#: ``NewJob.owner_id`` before the API key is checked: the key's owner takes its place.
_OWNER_FROM_KEY = ""
RESOLVE_OUTCOMES = frozenset({AttemptState.FAILED, AttemptState.CANCELLED, AttemptState.SUCCEEDED})
#: What ``GET /v1/certifications`` shows of each certificate behind a verdict.
CERTIFICATE_FIELDS = (
    "verdict",
    "mode",
    "model",
    "adapter_version",
    "contract_fingerprint",
    "certified_at",
    "expires_at",
    "repeats",
    "cases",
    "pass_rates",
    "failures",
)
#: What our ids look like (``job_01J...``); anything else is not found without a query.
_ID = re.compile(r"[A-Za-z0-9_-]{1,100}")


@dataclasses.dataclass(frozen=True, slots=True)
class _Refusal:
    allowed: bool
    reason: str


class NoCertifications:
    """Refuse every fallback: the policy when no certification registry is available."""

    def can_failover(
        self, contract: Any, primary: ProviderConfig, fallback: ProviderConfig
    ) -> Verdict:
        """Refuse, saying why."""
        return _Refusal(False, "no certification registry is loaded")


class JobService:
    """Create and follow jobs, request attempts, cancel, and resolve unknown attempts."""

    def __init__(
        self,
        store: JobStore,
        settings: Settings,
        catalog: Mapping[str, ContractSpec],
        certifications: Certifications | None = None,
        hub: ChangeHub | None = None,
        metrics: Metrics | None = None,
        keys: ApiKeys | None = None,
    ) -> None:
        self.store = store
        #: Where API keys live (the store implements both seams).
        self.keys: ApiKeys = keys if keys is not None else store  # type: ignore[assignment]
        self.settings = settings
        self.catalog = catalog
        self.certifications: Certifications = certifications or NoCertifications()
        self.hub = hub
        self.metrics = metrics or Metrics()
        self.routes = Routes(
            settings,
            catalog,
            settings.providers,
            self.certifications,
        )
        self._runner: LocalRunner | None = None
        #: Checks the API key in the creating statement, where the store can.
        self._keyed = store if keys is None and isinstance(store, KeyedCreation) else None

    def use_local_runner(self, runner: LocalRunner | None) -> None:
        """Run new jobs' first attempts in this process with ``runner`` (None: stop)."""
        self._runner = runner

    def new_job(
        self, idempotency_key: str, name: str, input_: Any, requested: str | None = None
    ) -> NewJob:
        """Validate what a caller asks for; return it as a ``NewJob`` of no owner yet.

        The owner is the API key's, filled in by ``create_job_for_key``. The HTTP route
        calls this before the key is checked, so it must answer a refusal only once
        ``require_key`` has passed.
        """
        contract = self._contract(name)
        primary = self._primary(name, requested)
        errors = contract.validate_input(input_)
        if errors:
            raise InvalidInput(f"input is not valid for {name}", errors=errors)
        try:
            print_ = fingerprint(name, input_, requested)
        except UnfingerprintableInput as exc:
            raise InvalidInput(f"input cannot be canonicalized: {exc}") from exc
        return NewJob(
            owner_id=_OWNER_FROM_KEY,
            idempotency_key=idempotency_key,
            fingerprint=print_,
            contract=name,
            provider=primary,
            requested_provider=requested,
            input=input_,
        )

    async def create_job_for_key(self, secret: str, new: NewJob) -> CreateResult:
        """Create ``new`` for the owner of the API key ``secret``, or return the job that
        owner's idempotency key already made (replay or conflict); ``Unauthorized`` for
        an unknown or revoked key.

        Where the store can (``KeyedCreation``: PostgreSQL), the key is checked by the
        statement that creates the job, so it costs no round trip of its own, and it is
        still read on every request: a revoked key is refused at once.
        """
        result = await self._create(new, secret)
        if result.outcome is CreateOutcome.CREATED:
            self.metrics.job_created()
        elif result.outcome is CreateOutcome.REPLAYED:
            self.metrics.job_replayed()
        else:
            self.metrics.job_conflicted()
        return result

    async def authenticate(self, secret: str) -> Principal | None:
        """Return the principal of an unrevoked API key, or None."""
        return await self.keys.authenticate(secret)

    async def require_key(self, secret: str) -> Principal:
        """Return the principal of an unrevoked API key; raise ``Unauthorized`` otherwise."""
        principal = await self.authenticate(secret)
        if principal is None:
            raise Unauthorized(KEY_REFUSED)
        return principal

    async def _create(self, new: NewJob, secret: str) -> CreateResult:
        """Insert the job; when a local runner is free, claim and start its first attempt.

        Running the first attempt where the request is saves the notify, wake-up and
        claim transaction; the claim is a lease like any other (R7).
        """
        runner = self._runner
        claim = await runner.reserve(new.provider, new) if runner is not None else None
        slot = runner if claim is not None else None  # the runner whose slot is reserved
        try:
            if self._keyed is not None:
                result = await self._keyed.create_or_get_for_key(secret, new, claim)
            else:
                result = await self._create_as_owner(secret, new, claim)
        except BaseException:
            if slot is not None:
                slot.release()
            raise
        if result is None:
            # Not told in one statement (an unknown or revoked key, or the key's job not
            # visible yet): give the slot back before the key is read, so a stranger
            # holds none meanwhile; a valid key's job then queues for any runner.
            if slot is not None:
                slot.release()
            return await self._create_as_owner(secret, new, None)
        if slot is not None:
            if result.claimed is None:
                slot.release()
            else:
                slot.run_claimed(result.claimed, claim)
                # One loop turn for the attempt: its provider call goes out now, and this
                # request sets up its wait (if any) while the provider works.
                await asyncio.sleep(0)
        return result

    async def _create_as_owner(
        self, secret: str, new: NewJob, claim: ClaimSpec | None
    ) -> CreateResult:
        """Read the API key, then create ``new`` as its owner's (``Unauthorized`` if not valid)."""
        principal = await self.require_key(secret)
        return await self.store.create_or_get(
            dataclasses.replace(new, owner_id=principal.owner_id), claim
        )

    async def get_job(self, principal: Principal, job_id: str) -> JobRecord:
        """Return the caller's job with its attempts."""
        _check_id(job_id, "job")
        job = await self.store.get_job(job_id, principal.owner_id)
        if job is None:
            raise NotFound(f"No job {job_id!r}.")
        return job

    async def job_events(self, principal: Principal, job_id: str) -> list[EventRecord]:
        """Return the audit trail of one of the caller's jobs."""
        job = await self.get_job(principal, job_id)
        return await self.store.events(job.id)

    async def get_any_job(self, principal: Principal, job_id: str) -> JobRecord:
        """Return any owner's job with its attempts (admin: the job of an unknown attempt)."""
        self.require_admin(principal)
        _check_id(job_id, "job")
        job = await self.store.get_job(job_id)
        if job is None:
            raise NotFound(f"No job {job_id!r}.")
        return job

    async def list_jobs(
        self,
        principal: Principal,
        *,
        status: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> tuple[list[JobRecord], str | None]:
        """List the caller's jobs, newest first; return the page and the next cursor."""
        try:
            wanted = JobStatus(status) if status is not None else None
        except ValueError:
            raise BadRequest(
                f"status must be one of {', '.join(s.value for s in JobStatus)}."
            ) from None
        if not 1 <= limit <= MAX_PAGE:
            raise BadRequest(f"limit must be between 1 and {MAX_PAGE}.")
        try:
            return await self.store.list_jobs(
                principal.owner_id, status=wanted, limit=limit, cursor=cursor
            )
        except ValueError as exc:
            raise BadRequest("The cursor is not valid.") from exc

    async def request_attempt(
        self, principal: Principal, job_id: str, provider: str
    ) -> AddAttemptResult:
        """Add a manual attempt if R4 allows and the provider may stand in for the primary."""
        fallback = self._provider(provider)
        job = await self.get_job(principal, job_id)
        if provider != job.provider:
            primary = self.settings.providers.get(job.provider)
            contract = self.catalog.get(job.contract)
            if primary is None or contract is None:
                raise FallbackNotCertified(
                    f"{job.contract} on {job.provider} is no longer configured."
                )
            verdict = self.certifications.can_failover(contract, primary, fallback)
            if not verdict.allowed:
                await self.store.record_event(
                    job.id,
                    "attempt_refused",
                    {
                        "why": "fallback not certified",
                        "provider": provider,
                        "certification": verdict.reason,
                        "reason": AttemptReason.MANUAL.value,
                    },
                )
                raise FallbackNotCertified(
                    f"{provider} may not replace {job.provider} for {job.contract}: "
                    f"{verdict.reason}"
                )
        result = await self.store.add_attempt(
            job.id, provider, AttemptReason.MANUAL, owner_id=principal.owner_id
        )
        if result.outcome is AddAttemptOutcome.NOT_FOUND:
            raise NotFound(f"No job {job_id!r}.")
        return result

    async def cancel(self, principal: Principal, job_id: str) -> TransitionResult:
        """Cancel the caller's job through CAS; a conflict means it was already decided."""
        _check_id(job_id, "job")
        result = await self.store.cancel(job_id, principal.owner_id)
        if result.outcome is TransitionOutcome.NOT_FOUND:
            raise NotFound(f"No job {job_id!r}.")
        return result

    async def list_attempts(
        self, principal: Principal, state: str | None, *, limit: int = 100
    ) -> list[AttemptRecord]:
        """List attempts in ``state`` across all owners (admin)."""
        self.require_admin(principal)
        try:
            wanted = AttemptState(state) if state is not None else None
        except ValueError:
            raise BadRequest(
                f"state must be one of {', '.join(s.value for s in AttemptState)}."
            ) from None
        if not 1 <= limit <= 1000:
            raise BadRequest("limit must be between 1 and 1000.")
        return await self.store.list_attempts(wanted, limit=limit)

    async def resolve(
        self,
        principal: Principal,
        attempt_id: str,
        outcome: str,
        result: Any = None,
        note: str = "",
    ) -> TransitionResult:
        """Resolve an ``unknown`` attempt out of band (admin); ``succeeded`` goes through R5."""
        self.require_admin(principal)
        _check_id(attempt_id, "attempt")
        try:
            target = AttemptState(outcome)
        except ValueError:
            target = None
        if target not in RESOLVE_OUTCOMES or target is None:
            raise InvalidInput("'outcome' must be one of failed, cancelled, succeeded.")
        if target is not AttemptState.SUCCEEDED and result is not None:
            raise InvalidInput("'result' is only accepted with outcome 'succeeded'.")
        attempt = await self.store.get_attempt(attempt_id)
        job = await self.store.get_job(attempt.job_id) if attempt is not None else None
        if attempt is None or job is None:
            raise NotFound(f"No attempt {attempt_id!r}.")
        next_provider = None
        if target is AttemptState.SUCCEEDED and not attempt.state.terminal:
            # A finished attempt never becomes unknown: the store refuses it (409) without
            # reading the result. Any other may be unknown by the time the store looks.
            self._check_result(job, result)
        elif target is AttemptState.FAILED and attempt.state is AttemptState.UNKNOWN:
            # A resolution to `failed` is a definite failure: fail over as the dispatcher
            # would (R6); the store re-checks the R4 guard in the same transaction.
            next_provider = self.routes.next_provider(job, attempt)
        res = await self.store.resolve(
            attempt_id, target, result=result, note=note, next_provider=next_provider
        )
        if res.outcome is TransitionOutcome.NOT_FOUND:
            raise NotFound(f"No attempt {attempt_id!r}.")
        return res

    async def wait_for(self, job: JobRecord, seconds: float, *, fresh: bool = False) -> JobRecord:
        """Return ``job`` once it is settled or ``seconds`` have passed, whichever is first.

        A change made in this process hands the waiter the job as its transaction
        committed it, so nothing is re-read; a change from another process (or none,
        within the poll interval) makes the waiter re-read. ``fresh``: ``job`` comes from
        this process's own creating transaction, so the first read is skipped.
        """
        seconds = max(0.0, min(seconds, MAX_WAIT))
        if job.status.settled or seconds == 0:
            return job
        deadline = time.monotonic() + seconds
        hub = self.hub or ChangeHub()
        with hub.watch(job.id) as watch:
            stale = not fresh
            while True:
                if stale:
                    # A re-read the database does not answer by the deadline leaves the
                    # job as last known, and one it fails is tried again at the next
                    # poll: the answer comes at the deadline, whatever the database does
                    # (a partition, a failover).
                    try:
                        read = await _within(
                            self.store.get_job(job.id, job.owner_id), deadline - time.monotonic()
                        )
                    except Exception as exc:
                        if not self.store.unavailable(exc, "wait"):
                            raise
                        read = job
                    if read is _LATE or read is None:
                        return job
                    assert isinstance(read, JobRecord)
                    job = read
                remaining = deadline - time.monotonic()
                if job.status.settled or remaining <= 0:
                    return job
                await watch.wait(min(remaining, WAIT_POLL_INTERVAL))
                record, reread = watch.take()
                if record is not None and record.status.settled:
                    # A decision this process committed is the answer, whatever the echo
                    # of its own NOTIFY says.
                    return record  # type: ignore[no-any-return]
                if record is not None:
                    job = record
                # Re-read after another process's change, or when the poll ran out.
                stale = reread or record is None

    def certifications_matrix(self) -> list[dict[str, Any]]:
        """Return the effective failover matrix: one row per contract and configured fallback."""
        rows: list[dict[str, Any]] = []
        for name in sorted(self.catalog):
            route = self.settings.route_for(name)
            if route is None:
                continue
            primary = self.settings.providers.get(route.primary)
            for fallback_name in route.fallbacks:
                fallback = self.settings.providers.get(fallback_name)
                detail = ""
                if primary is None or fallback is None:
                    allowed, reason = False, "provider not configured"
                else:
                    verdict = self.certifications.can_failover(
                        self.catalog[name], primary, fallback
                    )
                    allowed, reason = verdict.allowed, str(verdict.reason)
                    detail = str(getattr(verdict, "detail", ""))
                rows.append(
                    {
                        "contract": name,
                        "primary": route.primary,
                        "fallback": fallback_name,
                        "allowed": allowed,
                        "reason": reason,
                        "detail": detail,
                        "fingerprint": getattr(self.catalog[name], "fingerprint", None),
                        "primary_certificate": self._certificate(name, route.primary),
                        "fallback_certificate": self._certificate(name, fallback_name),
                    }
                )
        return rows

    def _certificate(self, contract: str, provider: str) -> dict[str, Any] | None:
        """Summarize the newest certificate behind a verdict (when the policy keeps them)."""
        lookup = getattr(self.certifications, "latest_certificate", None)
        entry = lookup(contract, provider) if lookup is not None else None
        if entry is None:
            return None
        return {field: entry.get(field) for field in CERTIFICATE_FIELDS}

    async def render_metrics(self) -> tuple[bytes, str]:
        """Refresh the database-derived gauges and return the Prometheus exposition."""
        await self.metrics.refresh(self.store)
        return self.metrics.render()

    def contracts(self) -> list[dict[str, Any]]:
        """Describe the contracts a client may name, with their routes."""
        out: list[dict[str, Any]] = []
        for name in sorted(self.catalog):
            contract = self.catalog[name]
            route = self.settings.route_for(name)
            out.append(
                {
                    "name": name,
                    "description": contract.description,
                    "hedgeable": contract.hedgeable,
                    "input_schema": contract.input_schema,
                    "output_schema": contract.output_schema,
                    "route": None
                    if route is None
                    else {"primary": route.primary, "fallbacks": list(route.fallbacks)},
                }
            )
        return out

    def _contract(self, name: str) -> ContractSpec:
        contract = self.catalog.get(name)
        if contract is None:
            raise UnknownContract(f"No contract named {name!r}; see GET /v1/contracts.")
        return contract

    def _provider(self, name: str) -> ProviderConfig:
        cfg = self.settings.providers.get(name)
        if cfg is None:
            raise UnknownProvider(f"No provider named {name!r} is configured.")
        return cfg

    def _primary(self, contract: str, requested: str | None) -> str:
        if requested is not None:
            return self._provider(requested).name
        route = self.settings.route_for(contract)
        if route is None:
            raise UnknownProvider(f"No route is configured for {contract!r}; name a provider.")
        return self._provider(route.primary).name

    def _check_result(self, job: JobRecord, result: Any) -> None:
        """Validate a result an admin says an unknown attempt produced."""
        contract = self.catalog.get(job.contract)
        if contract is None:
            raise UnknownContract("The attempt's contract is no longer in the catalog.")
        errors = contract.validate_output(result)
        if errors:
            raise InvalidInput("result is not valid for the contract's output", errors=errors)

    @staticmethod
    def require_admin(principal: Principal) -> None:
        if not principal.is_admin:
            raise Forbidden("This route needs an API key with the admin scope.")


#: What ``_within`` returns for an awaitable that did not finish in time.
_LATE = object()
#: Reads left to finish after their waiter answered without them (kept referenced).
_ABANDONED: set[asyncio.Task[Any]] = set()


async def _within(awaitable: Coroutine[Any, Any, Any], seconds: float) -> Any:
    """Return what ``awaitable`` gives within ``seconds``, else ``_LATE``.

    A late one is not cancelled: a read cancelled in the middle of a statement leaves its
    connection for the pool to untangle. It finishes (or fails) within the database's own
    deadline, in the background, and its result is dropped.
    """
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=max(seconds, 0.0))
    except asyncio.CancelledError:
        task.cancel()
        raise
    if task in done:
        return task.result()
    _ABANDONED.add(task)
    task.add_done_callback(_forget)
    return _LATE


def _forget(task: asyncio.Task[Any]) -> None:
    _ABANDONED.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: a late read's failure is not "never retrieved"


def _check_id(value: str, kind: str) -> None:
    """Raise ``NotFound`` for a value that cannot be one of our ids (NUL, unicode, huge)."""
    if not _ID.fullmatch(value):
        raise NotFound(f"No {kind} {value[:100]!r}.")
