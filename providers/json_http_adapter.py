"""The JSON-over-HTTP adapter base: one round trip to a provider, and what can go wrong.

The adapters (``openai``, ``anthropic``, ``gemini``, ``openai-compatible``) subclass
``JsonHttpAdapter``: they only build a request body and read a response body; this module
sends it (through the shared ``providers.client``), times and classifies. Errors are
translated here and nowhere else, each ``raise ... from exc`` into the tree drawn in
``providers.base``:

===========================================  =========================  =========
what happened                                raised                     outcome
===========================================  =========================  =========
connection refused, DNS, TLS, connect        ``ConnectFailed``          definite
timeout, no pooled connection, proxy refused
400/401/403/404/422 (any 4xx but 429)        ``Rejected``               definite
429 (a rate limit)                           ``RateLimited``            definite
503, 529 (overloaded)                        ``Overloaded``             definite
a hard quota: OpenAI ``insufficient_quota``, ``QuotaExhausted``         definite
Anthropic billing, Gemini's per-day quota
500, other 5xx not configured unknown        ``Unavailable``            definite
refusal / stopped early (length, filter)     ``Refused``                definite
answer not a JSON value / not the envelope   ``BadOutput``              definite
(or a body that cannot be decoded)
read/write timeout, whole-call deadline      ``TimedOut``               unknown
connection dropped mid-response,             ``ConnectionLost``         unknown
body shorter than its Content-Length, any
other transport error after sending
status in ``unknown_statuses`` (502, 504)    ``AmbiguousStatus``        unknown
===========================================  =========================  =========

Which error answer is a rate limit, an overload or a hard quota is each protocol's to say
(``capacity_of``, from its plug-in's ``capacity.py``; by default by status alone), and
so is reading its rate-limit headers (``limits_of``, on errors and on successful answers
alike: ``ProviderResult.limits``). ``RateLimited`` and ``Overloaded`` are ``NoCapacity``:
the same request may be sent again after ``retry_after``; ``QuotaExhausted`` is not.

Secrets: the API key travels only in request headers. Headers are never logged, and any
text taken from a provider's answer is redacted before it reaches a message or a log.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any

import httpx
import msgspec

from providers.base import (
    AmbiguousStatus,
    BadOutput,
    ConnectFailed,
    ConnectionLost,
    NoCapacity,
    Overloaded,
    ProviderError,
    ProviderRequest,
    ProviderResult,
    QuotaExhausted,
    RateLimited,
    RateLimits,
    Rejected,
    RequestRefused,
    SchemaNotSupported,
    TimedOut,
    Unavailable,
    Usage,
)
from providers.capacity import Capacity, CapacityAnswer, generic_capacity, retry_after_seconds
from providers.client import ProviderClient
from providers.endpoint import Capabilities, EndpointConfig
from providers.http1_pool import pool_wait_expired

logger = logging.getLogger("providers")

EXCERPT_CHARS = 200  # characters of provider text kept in errors
#: The share of a call's deadline that connecting (or waiting for a pooled connection)
#: may take at most: running out of it sent nothing, so it ends ``ConnectFailed`` before
#: the deadline can end the call ``unknown``.
CONNECT_SHARE = 0.9
#: Statuses that say the key was refused; any 4xx does when the key's variable is unset.
AUTH_STATUSES = frozenset({401, 403})
_KEY_LIKE = re.compile(r"\b(sk-[A-Za-z0-9_\-*.]{6,}|AIza[0-9A-Za-z_\-]{10,})")


def redact(text: str, secret: str | None) -> str:
    """Remove ``secret`` and anything shaped like an API key from ``text``."""
    if secret:
        text = text.replace(secret, "***")
    return _KEY_LIKE.sub("***", text)


def excerpt(text: str, secret: str | None = None) -> str:
    """Return a short, redacted excerpt of ``text`` for an error message."""
    text = redact(text, secret)
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "..."


def parse_json_text(text: str, *, request_id: str | None = None) -> Any:
    """Parse the model's text, which must be one JSON value by itself."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise BadOutput(
            f"the model's answer is not a JSON value by itself: {excerpt(text)!r}",
            reason="not_json",
            request_id=request_id,
            body_excerpt=excerpt(text),
        ) from exc


def _json_or_none(body: bytes) -> Any:
    """Decode an error body as JSON; None when it is not JSON (an HTML page, a proxy's text)."""
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def _error_message(data: Any, body: bytes) -> str:
    """Pull the human message out of an error body of any of the three APIs."""
    if data is None:
        return body.decode("utf-8", "replace").strip()
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        message = data["error"].get("message")
        if isinstance(message, str):
            return message
    return json.dumps(data)[: EXCERPT_CHARS * 2]


#: Converted schemas an adapter keeps (one per contract is the usual need).
CONVERTED_SCHEMAS_KEPT = 256


class JsonHttpAdapter:
    """Send one JSON POST per call and classify the outcome; subclasses speak the protocol."""

    #: The header that carries the provider's request id.
    request_id_header: str | None = "x-request-id"

    def __init__(self, config: EndpointConfig, client: httpx.AsyncClient) -> None:
        self.config = config
        self.client = client
        self.name = config.name
        self.capabilities = config.capabilities(self.default_capabilities(config.model))
        self._converted: dict[tuple[int, Callable[..., Any]], tuple[Any, Any]] = {}

    @staticmethod
    def default_capabilities(model: str) -> Capabilities:
        """Return what ``model`` accepts when the config says nothing (the protocol's rule)."""
        return Capabilities()

    def converted(
        self, schema: dict[str, Any], convert: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        """Return ``convert(schema)``, computed once per schema object.

        A contract's schema is one object for the process's life, and converting it to an
        API's dialect walked and copied it on every call (3 % of a sync job's CPU). The
        result is shared between calls: read it, never change it. A conversion that fails
        is not kept, so it fails again the same way.
        """
        key = (id(schema), convert)
        hit = self._converted.get(key)
        if hit is not None and hit[0] is schema:  # the entry holds the schema: id not reused
            return hit[1]  # type: ignore[no-any-return]
        result = convert(schema)
        if len(self._converted) >= CONVERTED_SCHEMAS_KEPT:
            self._converted.clear()
        self._converted[key] = (schema, result)
        return result

    def build(self, request: ProviderRequest) -> tuple[str, dict[str, str], dict[str, Any]]:
        """Return ``(url, headers, body)`` for ``request``.

        Raise ``SchemaNotSupported`` when the contract's schema has no equivalent in the
        API's dialect.
        """
        raise NotImplementedError

    def check(self, body: dict[str, Any]) -> None:
        """Raise ``RequestRefused`` for a body the API would refuse (its request rules)."""

    @staticmethod
    def capacity_of(status: int, body: Any) -> CapacityAnswer | None:
        """Say whether an error answer is a rate limit, an overload or a hard quota.

        ``body`` is the decoded JSON (None when it is not JSON). By default the status
        alone decides (429, 503, 529); a protocol whose API says more overrides this.
        """
        return generic_capacity(status)

    @staticmethod
    def limits_of(headers: httpx.Headers) -> RateLimits | None:
        """Read what an answer's headers say about rate limits (None: this API says nothing).

        Called on every successful answer: keep it to one pass over the headers.
        """
        return None

    def status_error(
        self, response: httpx.Response, request_id: str | None, hint: str | None = None
    ) -> ProviderError:
        """Classify a non-2xx answer (``hint``: the usual mistake behind it, if known)."""
        config = self.config
        code = response.status_code
        data = _json_or_none(response.content)
        detail = excerpt(_error_message(data, response.content), config.api_key())
        message = f"{config.name} answered HTTP {code}: {detail}"
        common: dict[str, Any] = {
            "reason": f"status_{code}",
            "status_code": code,
            "request_id": request_id,
            "body_excerpt": detail,
            "hint": hint,
        }
        if code in config.unknown_statuses:
            return AmbiguousStatus(message, **common)
        capacity = self.capacity_of(code, data)
        if capacity is not None and capacity.kind is Capacity.QUOTA:
            return QuotaExhausted(message, **{**common, "reason": "quota_exhausted"})
        if capacity is not None:
            limited = capacity.kind is Capacity.RATE_LIMITED
            limits = self.limits_of(response.headers)
            retry_after = retry_after_seconds(response.headers)
            if retry_after is None:
                retry_after = capacity.retry_after
            if retry_after is None and limited and limits is not None:
                retry_after = limits.exhausted_reset_s()  # the bucket that refused
            error = RateLimited if limited else Overloaded
            return error(message, retry_after=retry_after, limits=limits, **common)
        if 500 <= code <= 599:
            return Unavailable(message, **common)
        return Rejected(message, **common)

    def omitted(self, request: ProviderRequest) -> tuple[str, ...]:
        """Return the parameters of ``request`` this model refuses, which are not sent."""
        return () if self.capabilities.temperature else ("temperature",)

    def hint(self, status: int, url: str) -> str | None:
        """Return the usual mistake behind ``status`` on ``url``, if one is known."""
        key_missing = bool(self.config.api_key_env) and not self.config.api_key()
        if status in AUTH_STATUSES or (key_missing and 400 <= status <= 499):
            return self.key_hint()
        return None

    def key_hint(self) -> str:
        """Say what to check about the API key: its variable unset, or its value."""
        env = self.config.api_key_env
        if not env:
            return "no api_key_env is configured"
        if not self.config.api_key():
            return f"{env} is not set in the gateway's environment"
        return f"is {env} set to a valid key?"

    def deadline_text(self, deadline: float) -> str:
        """Name the deadline as configured (``the 10s deadline``), not as the float left.

        An attempt is sent with what is left of its deadline (9.99927 s of 10); when that
        is nearly all of it the configured value is the one an operator recognizes.
        """
        configured = self.config.timeout
        if abs(configured - deadline) <= max(0.5, configured * 0.05):
            return f"the {configured:g}s deadline"
        return f"the {configured:g}s deadline ({deadline:.1f}s of it left when sent)"

    def prepare(self, request: ProviderRequest) -> tuple[str, dict[str, str], dict[str, Any]]:
        """Build the request and check it locally; raise ``Rejected`` before sending a bad one."""
        try:
            url, headers, body = self.build(request)
        except SchemaNotSupported as exc:
            raise Rejected(
                f"{self.name} ({self.config.protocol}) cannot take the contract's schema "
                f"{request.schema_name!r} without changing its meaning: {exc}",
                reason="schema_unsupported",
            ) from exc
        try:
            self.check(body)
        except RequestRefused as exc:
            raise Rejected(
                f"{self.name} ({self.config.protocol}) would refuse this request, so it was "
                f"not sent: {exc.message}",
                reason="invalid_request",
            ) from exc
        return url, headers, body

    def parse(self, data: dict[str, Any], request_id: str | None, latency: float) -> ProviderResult:
        """Turn a 2xx body into a result, or raise ``Refused``/``BadOutput``."""
        raise NotImplementedError

    def body_request_id(self, data: dict[str, Any]) -> str | None:
        """Return the request id found in the body, when the header had none."""
        value = data.get("id")
        return value if isinstance(value, str) else None

    def _headers(self, request: ProviderRequest) -> dict[str, str]:
        headers = {"content-type": "application/json", **self.config.extra_headers}
        if request.idempotency_key:
            headers["idempotency-key"] = request.idempotency_key
        if request.traceparent:
            headers["traceparent"] = request.traceparent
            if request.tracestate:
                headers["tracestate"] = request.tracestate
        return headers

    async def call(self, request: ProviderRequest) -> ProviderResult:
        """Call the provider once; raise a ``ProviderError`` subclass on failure."""
        url, headers, body = self.prepare(request)
        started = time.perf_counter()
        logger.debug(
            "provider call %s model=%s key=%s",
            self.name,
            request.model,
            request.idempotency_key,
        )
        response = await self._send(url, headers, body, request.timeout)
        latency = time.perf_counter() - started
        request_id = (
            response.headers.get(self.request_id_header) if self.request_id_header else None
        )
        if not 200 <= response.status_code <= 299:
            hint = self.hint(response.status_code, url)
            error = self.status_error(response, request_id, hint)
            if isinstance(error, NoCapacity):  # not a failure: the attempt waits
                asked = error.retry_after
                wait = "" if asked is None else f", asked to wait {asked:g}s"
                logger.info("provider %s said not now: %s%s", self.name, error.capacity, wait)
            else:
                logger.info("provider %s failed: %s (%s)", self.name, error.reason, error.outcome)
            raise error
        data = self._envelope(response, request_id)
        request_id = request_id or self.body_request_id(data)
        result = self.parse(data, request_id, latency)
        omitted = self.omitted(request)
        limits = self.limits_of(response.headers)
        if omitted or limits is not None:
            return dataclasses.replace(result, omitted_parameters=omitted, limits=limits)
        return result

    async def _send(
        self, url: str, headers: dict[str, str], body: dict[str, Any], deadline: float
    ) -> httpx.Response:
        """POST ``body``; translate every transport failure into the error tree."""
        # Waiting for a pooled connection is bounded like connecting: both end before a
        # byte is sent, so running out of either is a definite failure (``ConnectFailed``)
        # that a failover may follow. Bounded by the deadline alone, a full pool would
        # meet the deadline around the call first and end ``unknown``; so would a connect
        # timeout as long as the deadline or longer, the deadline's timer (started first)
        # firing first. Both bounds end within ``CONNECT_SHARE`` of the deadline; a loop
        # late enough to run the pool's timer and the deadline's in one turn still ends
        # the pool's way (``pool_wait_expired``).
        bound = min(self.config.connect_timeout, deadline * CONNECT_SHARE)
        timeout = httpx.Timeout(deadline, connect=bound, pool=bound)
        where = f"{self.name} ({self.config.protocol})"
        # msgspec encodes what httpx's json= would (compact, UTF-8), several times faster.
        content = msgspec.json.encode(body)
        client = self.client
        try:
            async with asyncio.timeout(deadline):
                if isinstance(client, ProviderClient) and client.sends_in_one_hop():
                    return await client.post_read(
                        url, content=content, headers=headers, timeout=timeout
                    )
                return await client.post(url, content=content, headers=headers, timeout=timeout)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise ConnectFailed(f"could not connect to {where}: {_cause(exc)}") from exc
        except httpx.ProxyError as exc:
            raise ConnectFailed(
                f"the proxy refused to connect to {where}", reason="proxy_failed"
            ) from exc
        except httpx.PoolTimeout as exc:
            raise ConnectFailed(
                f"no connection to {where} became free in time", reason="pool_timeout"
            ) from exc
        except (httpx.ReadTimeout, httpx.WriteTimeout) as exc:
            raise TimedOut(f"{where} sent no answer within {self.deadline_text(deadline)}") from exc
        except TimeoutError as exc:
            if pool_wait_expired(exc):  # the pool's timer fired first, in the same turn
                raise ConnectFailed(
                    f"no connection to {where} became free in time", reason="pool_timeout"
                ) from exc
            raise TimedOut(f"{where} did not finish within {self.deadline_text(deadline)}") from exc
        except (httpx.UnsupportedProtocol, httpx.LocalProtocolError, httpx.InvalidURL) as exc:
            raise Rejected(
                f"the request to {where} could not be sent: {type(exc).__name__}",
                reason="bad_request_url",
            ) from exc
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise ConnectionLost(
                f"the connection to {where} broke after the request was sent: {type(exc).__name__}"
            ) from exc
        except httpx.DecodingError as exc:
            raise BadOutput(
                f"{where} sent a body that cannot be decoded", reason="bad_envelope"
            ) from exc
        except httpx.TooManyRedirects as exc:
            raise Rejected(f"{where} redirected too often", reason="redirects") from exc
        except httpx.HTTPError as exc:  # anything else after sending: assume it may have run
            raise ConnectionLost(
                f"transport failure talking to {where}: {type(exc).__name__}"
            ) from exc

    def _envelope(self, response: httpx.Response, request_id: str | None) -> dict[str, Any]:
        """Decode the 2xx JSON envelope; a body cut short is a lost connection."""
        raw = response.content
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > len(raw):
                raise ConnectionLost(
                    f"{self.name}'s answer ended after {len(raw)} of {declared} bytes",
                    reason="truncated_body",
                    status_code=response.status_code,
                    request_id=request_id,
                ) from exc
            text = raw.decode("utf-8", "replace")
            raise BadOutput(
                f"{self.name} answered {response.status_code} with a body that is not JSON",
                reason="bad_envelope",
                status_code=response.status_code,
                request_id=request_id,
                body_excerpt=excerpt(text, self.config.api_key()),
            ) from exc
        if not isinstance(data, dict):
            raise BadOutput(
                f"{self.name} answered with a JSON {type(data).__name__}, not an object",
                reason="bad_envelope",
                request_id=request_id,
            )
        return data


def _cause(exc: httpx.HTTPError) -> str:
    """Say what a transport error was, with the system's reason (``Name or service not
    known``, ``Connection refused``) that its class name alone loses."""
    text = str(exc).strip()
    if not text:
        cause = exc.__cause__ or exc.__context__
        text = str(cause).strip() if cause is not None else ""
    return f"{type(exc).__name__}: {excerpt(text)}" if text else type(exc).__name__


def bad_envelope(name: str, what: str, request_id: str | None) -> BadOutput:
    """Return the error for a 2xx body that lacks what the API promises."""
    return BadOutput(f"{name}'s answer has no {what}", reason="bad_envelope", request_id=request_id)


def usage_from(data: Any, input_key: str, output_key: str) -> Usage:
    """Read token counts from a usage object, ignoring anything that is not an int."""
    usage = data if isinstance(data, dict) else {}

    def count(key: str) -> int | None:
        value = usage.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return Usage(input_tokens=count(input_key), output_tokens=count(output_key))


def first(items: Any, pick: Callable[[Any], bool] = lambda _: True) -> Any:
    """Return the first element of a list that ``pick`` accepts, else None."""
    if isinstance(items, list):
        for item in items:
            if pick(item):
                return item
    return None
