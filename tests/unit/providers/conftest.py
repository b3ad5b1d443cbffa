from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from providers_support import BASE_URLS, KEY_ENV, OUTPUT_SCHEMA, SECRET, success_body

from providers.base import ProviderRequest
from providers.config import ProviderConfig


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


@pytest.fixture
def ok_body() -> Callable[..., dict[str, Any]]:
    return success_body
