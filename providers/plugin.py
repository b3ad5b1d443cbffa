"""What one wire protocol brings: its adapter, its dialect rules, its simulator wire, its traits.

A protocol is one plug-in (``providers/openai/``, ``providers/anthropic/``,
``providers/gemini/``, ``providers/openai_compatible.py``) whose module defines
``PLUGIN = ProtocolPlugin(...)``; ``providers.registry`` lists them, one line each.
Everything that knows the protocol lives in the plug-in: the adapter the gateway calls
(with the model's default capabilities, ``JsonHttpAdapter.default_capabilities``), the
schema translation into the API's dialect, the request rules the real API enforces (the
simulator refuses what they refuse; the adapter checks its own request with them before
sending), where the system prompt must sit (the render check), the simulator's wire format
(reading, answering, streaming, errors; ``providers.sim_wire``), and the traits the rest
of the code asks the registry for instead of naming protocols: whether ``reconcile = true``
is allowed (``providers.config``), which reported model names are snapshots of the
configured one (``providers.model_identity``), what a base URL looks like
(``certify.preflight``, the simulator's provider URLs) and which offline tokenizer counts
its prompts (``providers.tokenizers``).

This module is the description only: the plug-ins import it, the registry imports the
plug-ins, so nothing a protocol needs depends on the list of protocols.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any, Literal

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
    #: What a base URL looks like, said when the API path answers 404 (``certify.preflight``).
    base_url_hint: str
    #: The API path a base URL ends in after the host (``/v1`` when the adapter appends
    #: ``/chat/completions``; ``""`` when it adds the version itself): the simulator's
    #: provider URLs are ``.../p/{provider}`` followed by it.
    base_path: str = ""
    #: The simulator side; None when another plug-in's wire serves it (openai-compatible).
    wire: SimWire | None = None
    #: The provider can later be asked whether it did an attempt's work: its adapter offers
    #: ``lookup`` (``providers.lookup``), so ``reconcile = true`` is allowed.
    reconcilable: bool = False
    #: What may follow the configured model's name in the name the provider reports (a
    #: dated snapshot: ``-2024-08-06``); None: only the name itself and declared aliases.
    snapshot_suffix: re.Pattern[str] | None = None
    #: A prefix the provider may put before the reported name (Gemini's ``models/``).
    reported_model_prefix: str = ""
    #: The offline tokenizer of the render check when ``tokenizer_path`` is unset:
    #: ``tiktoken``, OpenAI's public encoding for the model's name (bundled or cached);
    #: ``estimate``, the deliberately high byte count (``providers.tokenizers``).
    tokenizer: Literal["tiktoken", "estimate"] = "estimate"
    #: ``gen_ai.provider.name`` of the GenAI semantic conventions for its calls' spans
    #: (``gcp.gemini``); empty: the protocol's name.
    genai_provider: str = ""
