"""OpenAI-compatible local servers (Ollama, vLLM, llama.cpp server): Chat Completions.

Same wire as ``openai`` with two differences such servers need: the output limit is
``max_tokens``, and ``response_format`` is ``json_schema`` or plain ``json_object`` as the
server supports (``response_format`` in the provider config). The key is optional.
"""

from __future__ import annotations

import re
from typing import Any

from providers.base import ProviderRequest
from providers.endpoint import Capabilities
from providers.openai import OpenAIAdapter, check_request, placement_errors
from providers.plugin import ProtocolPlugin

ADAPTER_VERSION = "openai-compatible/2"


class OpenAICompatibleAdapter(OpenAIAdapter):
    """Speak Chat Completions to a local OpenAI-compatible server."""

    adapter_version = ADAPTER_VERSION
    max_tokens_field = "max_tokens"

    @staticmethod
    def default_capabilities(model: str) -> Capabilities:
        """Return what a local model accepts (servers take ``temperature``)."""
        return Capabilities(temperature=True)

    def check(self, body: dict[str, Any]) -> None:
        """Check the Chat Completions rules, without those only OpenAI's models have."""
        check_request(body, model_rules=False, verdicts=self._strict_verdicts)

    def response_format(self, request: ProviderRequest) -> dict[str, Any]:
        """Return ``json_schema`` or ``json_object`` as configured."""
        if self.config.response_format == "json_object":
            return {"type": "json_object"}
        return super().response_format(request)


#: Served in the simulator by the OpenAI wire (same path and shapes).
PLUGIN = ProtocolPlugin(
    name="openai-compatible",
    adapter=OpenAICompatibleAdapter,
    adapter_version=ADAPTER_VERSION,
    placement_errors=placement_errors,
    base_url_hint="it should end in /v1, e.g. http://localhost:11434/v1",
    base_path="/v1",
    snapshot_suffix=re.compile(r":latest"),  # Ollama's default tag
)
