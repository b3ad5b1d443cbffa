"""Provider configuration (``[providers.NAME]`` in ``onejob.toml``); secrets stay in env."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Protocol = Literal["openai", "anthropic", "gemini", "openai-compatible"]


class ProviderConfig(BaseModel):
    """One provider endpoint: which wire protocol, where, which model, which key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    protocol: Protocol
    base_url: str
    model: str
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

    def api_key(self) -> str | None:
        """Read the API key from the environment at call time."""
        return os.environ.get(self.api_key_env) if self.api_key_env else None
