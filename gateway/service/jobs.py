"""Creating and reading jobs (R1, R2): the Idempotency-Key's use case, and the caller's reads.

A new job is validated (``new_job``) before the API key is checked, then created for the
key's owner (``create_job_for_key``): where the store can, the key is checked by the very
statement that creates the job. When this process's dispatcher has a free runner slot,
the job's first attempt is claimed in the creating transaction and run here at once
(the service's ``local_runner``, R7).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from gateway.domain.fingerprint import UnfingerprintableInput, fingerprint
from gateway.domain.ports import ContractSpec
from gateway.domain.records import (
    ClaimSpec,
    CreateOutcome,
    CreateResult,
    EventRecord,
    JobRecord,
    NewJob,
    Principal,
)
from gateway.domain.states import JobStatus
from gateway.errors import (
    BadRequest,
    InvalidInput,
    NotFound,
    QueueFull,
    Unauthorized,
    UnknownContract,
    UnknownProvider,
)
from gateway.service.base import ServiceBase, check_id
from gateway.settings import DEFAULT_JOB_DEADLINE

MAX_PAGE = 100  # jobs per page
#: What refusing an unknown or revoked API key says (``require_key``).
KEY_REFUSED = "The API key is not valid or was revoked."
#: ``NewJob.owner_id`` before the API key is checked: the key's owner takes its place.
_OWNER_FROM_KEY = ""


class Jobs(ServiceBase):
    """Create jobs for an API key's owner; read them back."""

    def new_job(
        self,
        idempotency_key: str,
        name: str,
        input_: Any,
        requested: str | None = None,
        deadline_s: float | None = None,
        *,
        traceparent: Sequence[str] = (),
        tracestate: Sequence[str] = (),
    ) -> NewJob:
        """Validate what a caller asks for; return it as a ``NewJob`` of no owner yet.

        The owner is the API key's, filled in by ``create_job_for_key``. The HTTP route
        calls this before the key is checked, so it must answer a refusal only once
        ``require_key`` has passed. ``deadline_s``: the client's own deadline for the job,
        at most the route's (``job_deadline_s``); not part of the fingerprint.
        ``traceparent``/``tracestate``: the request's header lines; the job keeps their
        context if valid (W3C Trace Context; a malformed one is ignored), or with tracing
        on the request's span's, so its spans join the caller's trace.
        """
        contract = self._contract(name)
        primary = self._primary(name, requested)
        deadline = self._deadline(name, deadline_s)
        errors = contract.validate_input(input_)
        if errors:
            raise InvalidInput(f"input is not valid for {name}", errors=errors)
        try:
            print_ = fingerprint(name, input_, requested)
        except UnfingerprintableInput as exc:
            raise InvalidInput(f"input cannot be canonicalized: {exc}") from exc
        parent, state = self.tracing.job_context(traceparent, tracestate)
        return NewJob(
            owner_id=_OWNER_FROM_KEY,
            idempotency_key=idempotency_key,
            fingerprint=print_,
            contract=name,
            provider=primary,
            requested_provider=requested,
            input=input_,
            deadline_s=deadline,
            traceparent=parent,
            tracestate=state,
        )

    async def create_job_for_key(self, secret: str, new: NewJob) -> CreateResult:
        """Create ``new`` for the owner of the API key ``secret``, or return the job that
        owner's idempotency key already made (replay or conflict); ``Unauthorized`` for
        an unknown or revoked key.

        The store checks the key as it creates (``JobStore.create_or_get_for_key``: on
        PostgreSQL in the creating statement itself, so it costs no round trip of its
        own), and it is still read on every request: a revoked key is refused at once.
        """
        if self.admission.full:
            result = await self._create_when_full(secret, new)
        else:
            result = await self._create(new, secret)
        self.tracing.note(
            **{"job.id": result.job.id, "create.outcome": result.outcome.value},
            replayed=result.outcome is CreateOutcome.REPLAYED,
        )
        if result.outcome is CreateOutcome.CREATED:
            self.metrics.job_created()
        elif result.outcome is CreateOutcome.REPLAYED:
            self.metrics.job_replayed()
        else:
            self.metrics.job_conflicted()
        return result

    async def _create_when_full(self, secret: str, new: NewJob) -> CreateResult:
        """The queue is full: answer a key that already made a job as always (a replay or
        a conflict), and refuse a new job without writing anything (``QueueFull``)."""
        principal = await self.require_key(secret)
        if await self.store.get_job_by_key(principal.owner_id, new.idempotency_key) is None:
            self.metrics.capacity.refused("queue_full")
            raise QueueFull(
                f"{self.admission.depth} jobs are waiting to be sent (the limit is "
                f"{self.settings.admission.max_queued}); nothing was created. Retry later "
                "with the same Idempotency-Key.",
                retry_after=self.settings.admission.retry_after,
            )
        # A replay or a conflict; created after all if the key's job went away meanwhile
        # (retention). The caller counts it as any other creation.
        return await self._create_as_owner(secret, new, None)

    def _deadline(self, contract: str, asked: float | None) -> float:
        """The job's deadline: the route's, or the client's when it asks for a shorter one."""
        route = self.settings.route_for(contract)
        default = route.job_deadline_s if route is not None else DEFAULT_JOB_DEADLINE
        if asked is None:
            return default
        if not 0 < asked <= default:
            raise InvalidInput(
                f"deadline_s must be more than 0 and at most {default:g} seconds "
                f"(the route's job deadline for {contract})."
            )
        return float(asked)

    async def authenticate(self, secret: str) -> Principal | None:
        """Return the principal of an unrevoked API key, or None."""
        return await self.store.authenticate(secret)

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
        in_line = claim is None
        if in_line:
            # Queued: its owner's fair place in line (a job run here at once takes none).
            place = self.places.place(secret, time.monotonic())
            if place:
                new = queued_later(new, place)
        try:
            result = await self.store.create_or_get_for_key(secret, new, claim)
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
        if in_line:
            self.places.owner_is(secret, result.job.owner_id)
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

    async def job_events(
        self, principal: Principal, job_id: str, after: int | None = None
    ) -> list[EventRecord]:
        """Return the audit trail of one of the caller's jobs (past the event ``after``)."""
        job = await self.get_job(principal, job_id)
        return await self.store.events(job.id, after=after, owner_id=job.owner_id)

    async def get_any_job(self, principal: Principal, job_id: str) -> JobRecord:
        """Return any owner's job with its attempts (admin: the job of an unknown attempt)."""
        self.require_admin(principal)
        check_id(job_id, "job")
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
        owner: str | None = None,
        idempotency_key: str | None = None,
    ) -> tuple[list[JobRecord], str | None]:
        """List an owner's jobs, newest first; return the page and the next cursor.

        The owner is the caller's unless ``owner`` names another (admin only: 403). With
        ``idempotency_key`` the page is the one job that key made for that owner, or none.
        """
        listed = principal.owner_id if owner is None else owner
        if listed != principal.owner_id:
            self.require_admin(principal)
        wanted = _page_filter(status, limit)
        if idempotency_key is not None:
            if cursor is not None:
                raise BadRequest("An Idempotency-Key names one job: it takes no cursor.")
            job = await self.store.get_job_by_key(listed, idempotency_key)
            found = job is not None and (wanted is None or job.status is wanted)
            return ([job] if found and job is not None else []), None
        try:
            return await self.store.list_jobs(listed, status=wanted, limit=limit, cursor=cursor)
        except ValueError as exc:
            raise BadRequest("The cursor is not valid.") from exc

    async def list_all_jobs(
        self,
        principal: Principal,
        *,
        status: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> tuple[list[JobRecord], str | None]:
        """List every owner's jobs, newest first, a page at a time (admin)."""
        self.require_admin(principal)
        wanted = _page_filter(status, limit)
        try:
            return await self.store.list_jobs(None, status=wanted, limit=limit, cursor=cursor)
        except ValueError as exc:
            raise BadRequest("The cursor is not valid.") from exc

    def _contract(self, name: str) -> ContractSpec:
        contract = self.catalog.get(name)
        if contract is None:
            raise UnknownContract(f"No contract named {name!r}; see GET /v1/contracts.")
        return contract

    def _primary(self, contract: str, requested: str | None) -> str:
        if requested is not None:
            return self._provider(requested).name
        route = self.settings.route_for(contract)
        if route is None:
            raise UnknownProvider(f"No route is configured for {contract!r}; name a provider.")
        return self._provider(route.primary).name


def queued_later(new: NewJob, delay: float) -> NewJob:
    """``new`` with its first attempt ``delay`` seconds later in line: built field by field,
    not by ``dataclasses.replace`` (10 us a job in a burst, most of the fair places' cost on
    the profile of sync jobs, docs/benchmarks.md)."""
    return NewJob(
        new.owner_id,
        new.idempotency_key,
        new.fingerprint,
        new.contract,
        new.provider,
        new.requested_provider,
        new.input,
        new.deadline_s,
        delay,
        new.traceparent,
        new.tracestate,
    )


def _page_filter(status: str | None, limit: int) -> JobStatus | None:
    """Return a listing's status filter; raise ``BadRequest`` on a bad status or limit."""
    try:
        wanted = JobStatus(status) if status is not None else None
    except ValueError:
        raise BadRequest(
            f"status must be one of {', '.join(s.value for s in JobStatus)}."
        ) from None
    if not 1 <= limit <= MAX_PAGE:
        raise BadRequest(f"limit must be between 1 and {MAX_PAGE}.")
    return wanted
