"""The fields of a provider's configuration, before they are checked against the registry.

What the protocol plug-ins read: the adapters take an ``EndpointConfig`` and the request
rules answer with ``Capabilities``. The plug-ins cannot import ``providers.config``, whose
``ProviderConfig`` checks ``protocol`` (and ``reconcile``) against the registry that lists
them (``providers.registry``); everything else constructs ``ProviderConfig``.

Also what a configured model accepts (``Capabilities``): the protocol's default for the
model, which its adapter knows, then the overrides of ``[providers.NAME.capabilities]``;
and the account's limits there (``ProviderLimits``, ``[providers.NAME.limits]``).
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator

#: A protocol's name (``ProviderConfig`` checks it is registered: ``providers.registry``).
Protocol = str

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Stands in for an ``api_key_env`` that is not a variable name (likely the key itself).
_NOT_AN_ENV_NAME = "<not an environment variable name: value hidden>"


@dataclasses.dataclass(frozen=True, slots=True)
class Capabilities:
    """What a model accepts, so the adapter can leave out what it would refuse."""

    #: The model takes a sampling ``temperature`` (recent Claude and OpenAI reasoning
    #: models refuse it; then the adapter omits it and stability rests on pass^k alone).
    temperature: bool = True


class CapabilityOverrides(BaseModel):
    """``[providers.NAME.capabilities]``: what the model accepts, where the default is wrong."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The model takes ``temperature``; None: the protocol's default for the model.
    temperature: bool | None = None


class ProviderLimits(BaseModel):
    """``[providers.NAME.limits]``: the provider's limits as the account has them.

    Known before the first answer, so calls can be paced from the start; the limits a
    provider announces in its headers (``providers.base.RateLimits``) are learned as well.
    None: not configured.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests_per_minute: PositiveInt | None = None
    tokens_per_minute: PositiveInt | None = None
    #: Calls in flight at once to this provider, at most.
    max_concurrency: PositiveInt | None = None


class EndpointConfig(BaseModel):
    """One provider endpoint: which wire protocol, where, which model, which key.

    Construct ``providers.config.ProviderConfig``, which checks ``protocol`` against the
    registry; this base is what the plug-ins' adapters are typed against.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str
    protocol: Protocol
    base_url: str
    model: str
    #: Further names the provider may report for ``model`` (beyond its dated snapshots, see
    #: ``providers.model_identity``); any other reported model fails certification.
    model_aliases: tuple[str, ...] = ()
    #: Name of the environment variable holding the API key (never the key itself).
    api_key_env: str | None = None
    timeout: float = 30.0  # seconds, whole call (the attempt deadline)
    connect_timeout: float = 5.0  # seconds
    context_window: int = 128_000  # tokens
    max_output_tokens: int = 1024  # tokens
    extra_headers: dict[str, str] = Field(default_factory=dict)
    #: HTTP statuses that mean "outcome unknown" rather than "definite failure".
    unknown_statuses: frozenset[int] = frozenset({502, 504})
    #: Local tokenizer for the render check: a tiktoken BPE file or a tokenizers JSON.
    tokenizer_path: str | None = None
    #: ``json_schema`` or ``json_object`` (openai-compatible servers differ).
    response_format: Literal["json_schema", "json_object"] = "json_schema"
    #: Send each attempt's downstream key where the provider can later be asked whether it
    #: did that attempt's work (OpenAI: ``store: true`` and ``metadata``; the completions
    #: are then kept by the provider). Only a reconcilable protocol offers such a lookup
    #: (its plug-in says so: ``ProtocolPlugin.reconcilable``).
    reconcile: bool = False
    #: Overrides of the protocol's per-model capability defaults (``temperature``).
    capabilities_override: CapabilityOverrides = Field(
        default_factory=CapabilityOverrides, alias="capabilities"
    )
    #: The account's limits at this provider, for pacing (``[providers.NAME.limits]``).
    limits: ProviderLimits = Field(default_factory=ProviderLimits)

    def capabilities(self, default: Capabilities) -> Capabilities:
        """Return what the configured model accepts: the protocol's ``default``, then overrides."""
        temperature = self.capabilities_override.temperature
        return Capabilities(temperature=default.temperature if temperature is None else temperature)

    @model_validator(mode="before")
    @classmethod
    def _hide_pasted_keys(cls, data: Any) -> Any:
        """Keep a key pasted into ``api_key_env`` out of validation error messages."""
        if isinstance(data, dict):
            value = data.get("api_key_env")
            if isinstance(value, str) and not _ENV_NAME.fullmatch(value):
                data = {**data, "api_key_env": _NOT_AN_ENV_NAME}
            # Unknown fields are refused anyway; hide the values of secret-looking ones.
            secretish = [
                k
                for k in data
                if k not in cls.model_fields
                and any(w in str(k).lower() for w in ("key", "secret", "token", "password"))
            ]
            if secretish:
                data = {**data, **{k: "<value hidden>" for k in secretish}}
        return data

    @field_validator("api_key_env")
    @classmethod
    def _names_a_variable(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.fullmatch(value):
            raise ValueError(
                "api_key_env must name an environment variable; the key itself belongs in "
                "the environment, never in the config file"
            )
        return value

    def api_key(self) -> str | None:
        """Read the API key from the environment at call time."""
        return os.environ.get(self.api_key_env) if self.api_key_env else None
