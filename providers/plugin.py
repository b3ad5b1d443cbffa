"""What one wire protocol brings: its adapter, its dialect rules, its simulator wire.

A protocol is one plug-in (``providers/openai/``, ``providers/anthropic/``,
``providers/gemini/``, ``providers/openai_compatible.py``) whose module defines
``PLUGIN = ProtocolPlugin(...)``; ``providers.registry`` lists them. Everything that knows
the protocol lives in the plug-in: the adapter the gateway calls (with the model's default
capabilities, ``JsonHttpAdapter.default_capabilities``), the schema translation into the
API's dialect, the request rules the real API enforces (the simulator refuses what they
refuse; the adapter checks its own request with them before sending), where the system
prompt must sit (the render check), and the simulator's wire format (reading, answering,
streaming, errors; ``providers.sim_wire``).

This module is the description only: the plug-ins import it, the registry imports the
plug-ins, so nothing a protocol needs depends on the list of protocols.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from providers.base import ProviderRequest
from providers.json_http_adapter import JsonHttpAdapter
from providers.sim_wire import SimWire


@dataclasses.dataclass(frozen=True, slots=True)
class ProtocolPlugin:
    """One wire protocol, complete."""

    name: str  #: the ``protocol`` value in a provider's config
    adapter: type[JsonHttpAdapter]
    adapter_version: str  #: part of every certificate (``openai/2``)
    #: Where the built request body puts the system prompt wrongly (render check).
    placement_errors: Callable[[dict[str, Any], ProviderRequest], list[str]]
    #: The simulator side; None when another plug-in's wire serves it (openai-compatible).
    wire: SimWire | None = None
