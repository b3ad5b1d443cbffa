"""What every use case of the service stands on: its dependencies and the checks they share.

``JobService`` (``gateway.service``) is this base with its use cases mixed in, one module
each; a use case on a job starts from ``get_job`` (the caller's own job), an admin one
from ``require_admin``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from gateway.capacity.gate import Capacity
from gateway.dispatch.routing import Routes
from gateway.domain.ports import (
    Certifications,
    ContractSpec,
    FailoverSuspensions,
    JobStore,
    LocalRunner,
    ShadowStore,
    Verdict,
)
from gateway.domain.records import JobRecord, Principal
from gateway.errors import Forbidden, NotFound, UnknownProvider
from gateway.metrics import Metrics
from gateway.notify import ChangeHub
from gateway.service.admission import FairPlaces, QueueAdmission
from gateway.settings import Settings
from gateway.tracing import NO_TRACING, Tracing
from providers.config import ProviderConfig

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


class ServiceBase:
    """Hold what the use cases need: the store, the settings, the catalog, the policy."""

    def __init__(
        self,
        store: JobStore,
        settings: Settings,
        catalog: Mapping[str, ContractSpec],
        certifications: Certifications | None = None,
        hub: ChangeHub | None = None,
        metrics: Metrics | None = None,
        capacity: Capacity | None = None,
        *,
        routes: Routes,
        suspensions: FailoverSuspensions | None = None,
        shadows: ShadowStore | None = None,
        local_runner: LocalRunner | None = None,
        tracing: Tracing = NO_TRACING,
    ) -> None:
        self.store = store
        self.settings = settings
        self.catalog = catalog
        self.certifications: Certifications = certifications or NoCertifications()
        self.hub = hub
        self.metrics = metrics or Metrics()
        #: What this process knows of its providers' capacity (the dispatcher's, when it
        #: runs here; shown by ``/readyz`` and the console).
        self.capacity = capacity or Capacity(settings.providers, settings.capacity)
        #: Whether a new job may be queued, and each owner's place in line (issue 43).
        self.admission = QueueAdmission(settings.admission)
        self.places = FairPlaces()
        #: Failover routing, built once by the composition root (``bootstrap.running``).
        self.routes = routes
        #: Optional capabilities, decided by the composition root: the registry's
        #: suspensions and certificates (the failover matrix shows them), the store's
        #: shadow checks (their tallies). None: not available here.
        self.suspensions = suspensions
        self.shadows = shadows
        #: Runs a new job's first attempt in this process when it has a free slot (R7):
        #: the dispatcher, when one runs here and the shortcut is on (the composition
        #: root decides); None: every job queues for any runner.
        self._runner = local_runner
        #: Spans (``gateway.tracing``): the null one unless ``[telemetry]`` enables them.
        self.tracing = tracing

    async def get_job(self, principal: Principal, job_id: str) -> JobRecord:
        """Return the caller's job with its attempts."""
        check_id(job_id, "job")
        job = await self.store.get_job(job_id, principal.owner_id)
        if job is None:
            raise NotFound(f"No job {job_id!r}.")
        return job

    @staticmethod
    def require_admin(principal: Principal) -> None:
        """Raise ``Forbidden`` unless the principal's key has the admin scope."""
        if not principal.is_admin:
            raise Forbidden("This route needs an API key with the admin scope.")

    def _provider(self, name: str) -> ProviderConfig:
        cfg = self.settings.providers.get(name)
        if cfg is None:
            raise UnknownProvider(f"No provider named {name!r} is configured.")
        return cfg


def check_id(value: str, kind: str) -> None:
    """Raise ``NotFound`` for a value that cannot be one of our ids (NUL, unicode, huge)."""
    if not _ID.fullmatch(value):
        raise NotFound(f"No {kind} {value[:100]!r}.")
