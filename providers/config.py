"""Provider configuration (``[providers.NAME]`` in ``onejob.toml``); secrets stay in env.

``ProviderConfig`` is ``providers.endpoint.EndpointConfig`` (its fields, ``Capabilities``,
``ProviderLimits``) checked against the registered protocol plug-ins
(``providers.registry``): ``protocol`` must name one, and ``reconcile = true`` needs one
that is reconcilable. The plug-ins import ``providers.endpoint``, never this module, so the
registry can list them without a cycle.
"""

from __future__ import annotations

from pydantic import field_validator, model_validator

from providers.endpoint import Capabilities as Capabilities
from providers.endpoint import CapabilityOverrides as CapabilityOverrides
from providers.endpoint import EndpointConfig
from providers.endpoint import Protocol as Protocol
from providers.endpoint import ProviderLimits as ProviderLimits
from providers.registry import PLUGINS
from providers.registry import PROTOCOLS as PROTOCOLS
from providers.registry import RECONCILABLE_PROTOCOLS as RECONCILABLE_PROTOCOLS


class ProviderConfig(EndpointConfig):
    """One provider endpoint: which wire protocol, where, which model, which key."""

    @field_validator("protocol")
    @classmethod
    def _known_protocol(cls, value: str) -> str:
        if value not in PLUGINS:
            known = ", ".join(sorted(PLUGINS))
            raise ValueError(f"unknown protocol {value!r} (known: {known})")
        return value

    @model_validator(mode="after")
    def _reconcile_needs_a_lookup(self) -> ProviderConfig:
        if self.reconcile and not PLUGINS[self.protocol].reconcilable:
            raise ValueError(
                f"reconcile = true needs a provider that can be asked about past requests; "
                f"the {self.protocol} protocol offers no such lookup (see docs/providers.md)"
            )
        return self
