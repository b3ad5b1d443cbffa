"""OpenAI-compatible local servers (Ollama, vLLM, llama.cpp server): Chat Completions.

Same wire as ``openai`` with two differences such servers need: the output limit is
``max_tokens``, and ``response_format`` is ``json_schema`` or plain ``json_object`` as the
server supports (``response_format`` in the provider config). The key is optional.
"""

from __future__ import annotations

from typing import Any

from providers.base import ProviderRequest
from providers.openai import OpenAIAdapter

ADAPTER_VERSION = "openai-compatible/1"


class OpenAICompatibleAdapter(OpenAIAdapter):
    """Speak Chat Completions to a local OpenAI-compatible server."""

    adapter_version = ADAPTER_VERSION
    max_tokens_field = "max_tokens"

    def response_format(self, request: ProviderRequest) -> dict[str, Any]:
        """Return ``json_schema`` or ``json_object`` as configured."""
        if self.config.response_format == "json_object":
            return {"type": "json_object"}
        return super().response_format(request)
