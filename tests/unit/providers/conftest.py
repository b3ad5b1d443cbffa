"""Provider test fixtures: config and request factories, and real-shaped bodies (``wire``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from providers.base import ProviderRequest
from providers.config import ProviderConfig

SECRET = "sk-test-Zq9SECRETvalue0123456789"
KEY_ENV = "ONEJOB_TEST_PROVIDER_KEY"

BASE_URLS = {
    "openai": "https://api.openai.test/v1",
    "anthropic": "https://api.anthropic.test",
    "gemini": "https://generativelanguage.googleapis.test",
    "openai-compatible": "http://localhost:11434/v1",
}
ENDPOINTS = {
    "openai": "https://api.openai.test/v1/chat/completions",
    "anthropic": "https://api.anthropic.test/v1/messages",
    "gemini": "https://generativelanguage.googleapis.test/v1beta/models/m-1:generateContent",
    "openai-compatible": "http://localhost:11434/v1/chat/completions",
}
PROTOCOLS = tuple(BASE_URLS)

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "category": {"type": "string", "enum": ["billing", "shipping", "other"]},
        "priority": {"type": "integer"},
    },
    "required": ["category", "priority"],
    "additionalProperties": False,
}
ANSWER = {"category": "billing", "priority": 2}


def success_body(protocol: str, text: str, finish: str | None = None) -> dict[str, Any]:
    """Return a real-shaped 2xx body whose model text is ``text``."""
    if protocol in ("openai", "openai-compatible"):
        return {
            "id": "chatcmpl-abc123",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "m-1-2025-01-01",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": None},
                    "logprobs": None,
                    "finish_reason": finish or "stop",
                }
            ],
            "usage": {"prompt_tokens": 51, "completion_tokens": 9, "total_tokens": 60},
        }
    if protocol == "anthropic":
        return {
            "id": "msg_01abc",
            "type": "message",
            "role": "assistant",
            "model": "m-1-20250101",
            "content": [{"type": "text", "text": text}],
            "stop_reason": finish or "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 51, "output_tokens": 9},
        }
    return {
        "candidates": [
            {
                "content": {"parts": [{"text": text}], "role": "model"},
                "finishReason": finish or "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 51,
            "candidatesTokenCount": 9,
            "totalTokenCount": 60,
        },
        "modelVersion": "m-1-001",
        "responseId": "resp-abc123",
    }


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, SECRET)
    return SECRET


@pytest.fixture
def make_config() -> Callable[..., ProviderConfig]:
    def make(protocol: str, **overrides: Any) -> ProviderConfig:
        fields: dict[str, Any] = {
            "name": f"test-{protocol}",
            "protocol": protocol,
            "base_url": BASE_URLS[protocol],
            "model": "m-1",
            "api_key_env": KEY_ENV,
            "connect_timeout": 0.5,
        }
        fields.update(overrides)
        return ProviderConfig(**fields)

    return make


@pytest.fixture
def make_request() -> Callable[..., ProviderRequest]:
    def make(**overrides: Any) -> ProviderRequest:
        fields: dict[str, Any] = {
            "system": "You triage support tickets. Answer with JSON only.",
            "user": 'Ticket: refund please\n<input contract="t@1">\n{"n": 1}\n</input>',
            "output_schema": OUTPUT_SCHEMA,
            "schema_name": "ticket_triage_v1",
            "model": "m-1",
            "temperature": 0.0,
            "max_output_tokens": 256,
            "timeout": 2.0,
            "idempotency_key": "job_01J/1",
        }
        fields.update(overrides)
        return ProviderRequest(**fields)

    return make


@dataclasses.dataclass(frozen=True)
class Wire:
    """What the provider tests share: the key, the schema, endpoints and real-shaped bodies."""

    secret: str = SECRET
    answer: dict[str, Any] = dataclasses.field(default_factory=lambda: dict(ANSWER))
    schema: dict[str, Any] = dataclasses.field(default_factory=lambda: OUTPUT_SCHEMA)
    endpoints: dict[str, str] = dataclasses.field(default_factory=lambda: dict(ENDPOINTS))

    @staticmethod
    def body(protocol: str, text: str, finish: str | None = None) -> dict[str, Any]:
        return success_body(protocol, text, finish)


@pytest.fixture
def wire() -> Wire:
    return Wire()
