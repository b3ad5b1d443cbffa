"""What one wire protocol brings: its adapter, its dialect rules, its simulator wire.

A protocol is one plug-in (``providers/openai/``, ``providers/anthropic/``,
``providers/gemini/``, ``providers/openai_compatible.py``), registered by one line in
``PLUGIN_MODULES``. Everything that knows the protocol lives in it: the adapter the gateway
calls, the schema translation into the API's dialect, the request rules the real API
enforces (the simulator refuses what they refuse; the adapter checks its own request with
them before sending), where the system prompt must sit (the render check), default
capabilities per model, and the simulator's wire format (reading, answering, streaming,
errors). The registry imports the modules lazily, so nothing here runs at import time.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from providers.base import ProviderRequest
    from providers.simulator.wire import SimWire
    from providers.transport import JsonHttpAdapter

#: The modules that each define ``PLUGIN``; a new protocol adds one line here.
PLUGIN_MODULES = (
    "providers.openai",
    "providers.anthropic",
    "providers.gemini",
    "providers.openai_compatible",
)


class RequestRefused(Exception):
    """A request the real API refuses: its status and the fields of its error envelope."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str | None = None,
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.code = code
        self.param = param


class SchemaNotSupported(ValueError):
    """The contract's schema cannot be said in this API's dialect without changing its meaning."""

    def __init__(self, path: tuple[str, ...], message: str) -> None:
        where = "/".join(path) or "(root)"
        super().__init__(f"at {where}: {message}")
        self.path = path


@dataclasses.dataclass(frozen=True, slots=True)
class Capabilities:
    """What a model accepts, so the adapter can leave out what it would refuse."""

    #: The model takes a sampling ``temperature`` (recent Claude and OpenAI reasoning
    #: models refuse it; then the adapter omits it and stability rests on pass^k alone).
    temperature: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class ProtocolPlugin:
    """One wire protocol, complete."""

    name: str  #: the ``protocol`` value in a provider's config
    adapter: type[JsonHttpAdapter]
    adapter_version: str  #: part of every certificate (``openai/2``)
    #: Default capabilities of a model of this protocol (config may override them).
    capabilities: Callable[[str], Capabilities]
    #: Where the built request body puts the system prompt wrongly (render check).
    placement_errors: Callable[[dict[str, Any], ProviderRequest], list[str]]
    #: The simulator side; None when another plug-in's wire serves it (openai-compatible).
    wire: SimWire | None = None


_registry: dict[str, ProtocolPlugin] | None = None


def plugins() -> dict[str, ProtocolPlugin]:
    """Return every registered plug-in by protocol name (imported on first use)."""
    global _registry
    if _registry is None:
        found: dict[str, ProtocolPlugin] = {}
        for module in PLUGIN_MODULES:
            plugin: ProtocolPlugin = importlib.import_module(module).PLUGIN
            found[plugin.name] = plugin
        _registry = found
    return _registry


def plugin_for(protocol: str) -> ProtocolPlugin:
    """Return the plug-in of ``protocol``; raise ``ValueError`` for an unknown one."""
    try:
        return plugins()[protocol]
    except KeyError:
        raise ValueError(f"unknown provider protocol {protocol!r}") from None
