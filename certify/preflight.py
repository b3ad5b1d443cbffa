"""Check each provider can be reached at all before any case runs (``onejob certify``).

Without this, a missing key or a wrong ``base_url`` shows up as the same failure in every
case of every contract (17 x ``status_401``). Each check gives one sentence instead:

- ``api_key_env`` names a variable that is not set;
- the base URL cannot be reached (connection refused, DNS, TLS, timeout);
- the API path answers 404: the base URL is wrong (the protocol plug-in's
  ``base_url_hint`` says what it should look like);
- the key is refused (401/403).

The probe is one POST of an empty JSON object to the path the adapter would call, with the
adapter's own headers: a real API answers it with a validation error (400/422), which
proves the path and the key without running (or paying for) a model call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import httpx

from contracts.model import Contract
from providers.config import ProviderConfig
from providers.factory import build_provider
from providers.json_http_adapter import redact
from providers.registry import plugin_for

PROBE_TIMEOUT = 10.0  # seconds for the whole probe


async def preflight(
    providers: Sequence[ProviderConfig], contract: Contract, client: httpx.AsyncClient
) -> list[str]:
    """Return one error per provider that cannot be certified at all (empty: all reachable)."""
    errors: list[str] = []
    for provider in providers:
        error = await _probe(provider, contract, client)
        if error is not None:
            errors.append(f"{provider.name}: {error}")
    return errors


async def _probe(
    provider: ProviderConfig, contract: Contract, client: httpx.AsyncClient
) -> str | None:
    if provider.api_key_env and not provider.api_key():
        return (
            f"api_key_env names {provider.api_key_env}, which is not set in the environment; "
            "set it to the provider's API key (no case was run)"
        )
    adapter = build_provider(provider, client)
    build = getattr(adapter, "build", None)
    if not callable(build):
        return None
    request = contract.provider_request(
        contract.cases[0].input,
        model=provider.model,
        timeout=PROBE_TIMEOUT,
        idempotency_key=None,
    )
    url, headers, _ = build(request)
    try:
        response = await client.post(url, content=b"{}", headers=headers, timeout=PROBE_TIMEOUT)
    except httpx.ConnectError as exc:
        local = httpx.URL(provider.base_url).host in ("127.0.0.1", "localhost", "::1")
        hint = (
            "; if it is onejob's bundled simulator, start it: `make serve` (or "
            "`.venv/bin/onejob sim serve --port PORT`), or certify with --sim"
            if local
            else ""
        )
        return (
            f"nothing answers at {provider.base_url} ({exc or 'connection refused'}): "
            f"is the provider running?{hint}"
        )
    except httpx.HTTPError as exc:
        return f"cannot reach {provider.base_url} ({type(exc).__name__}: {exc or 'no detail'})"
    said = redact(_message(response), provider.api_key())
    if response.status_code == 404:
        return (
            f"POST {_path(url)} answered 404 ({said}): the base_url "
            f"{provider.base_url!r} looks wrong; {plugin_for(provider.protocol).base_url_hint}"
        )
    if response.status_code in (401, 403):
        where = f"the key in {provider.api_key_env}" if provider.api_key_env else "no key"
        return f"the provider refused {where} with HTTP {response.status_code} ({said})"
    return None


def _path(url: str) -> str:
    return httpx.URL(url).path


def _message(response: httpx.Response) -> str:
    try:
        data = json.loads(response.content)
    except ValueError:
        return response.text[:120] or "empty body"
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])[:160]
    if isinstance(error, str):
        return error[:160]
    return json.dumps(data)[:160]
