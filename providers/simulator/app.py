"""The simulator as a plain ASGI application.

It is written against raw ASGI rather than a web framework on purpose: the scripted
misbehaviours (truncated bodies, connections dropped after the headers, requests held until
the client gives up) happen below the level a framework lets a handler reach.

Paths: ``/p/{provider}`` in front of the real API path names the simulated provider; without
it the provider is ``default``::

    POST [/p/{provider}]/v1/chat/completions                  OpenAI (and compatible)
    GET  [/p/{provider}]/v1/chat/completions?metadata[k]=v    OpenAI stored completions
    POST [/p/{provider}]/v1/messages                          Anthropic
    POST [/p/{provider}]/v1beta/models/{model}:generateContent Gemini (also /v1/models/...)
    POST [/p/{provider}]/v1beta/models/{model}:streamGenerateContent[?alt=sse]

Each wire format comes from its protocol's plug-in (``providers.registry``); a path nobody
answers gets a 404 in the envelope of the API it looks meant for. The contract catalog is
injected (``catalog=``) by whoever starts the simulator; the simulator imports none.
    GET  /_sim/health   GET /_sim/calls[?provider=]   POST /_sim/script   POST /_sim/reset
    GET|POST /_sim/profiles
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import itertools
import json
import re
import secrets
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from providers.base import RequestRefused
from providers.registry import PLUGINS
from providers.sim_wire import RouteMatch, SimWire, WireRequest, WireResponse
from providers.simulator.profiles import (
    OTHER_MODEL_SUFFIX,
    InputBlockError,
    Profile,
    answer,
    extract_input,
    find_contract,
    malformed,
)
from providers.simulator.script import (
    MAX_DELAY,
    MAX_SCRIPT_COUNT,
    Behaviour,
    BehaviourKind,
    CallRecord,
    Script,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DEFAULT_PROVIDER = "default"
MAX_BODY = 8 * 1024 * 1024  # bytes accepted in one request body

_PREFIX = re.compile(r"^/p/([^/]+)(/.*)$")


class DropConnection(Exception):
    """Raised inside the app to make the server close the connection mid-response."""


def wires() -> list[SimWire]:
    """Return the wire formats of every plug-in that has one."""
    return [p.wire for p in PLUGINS.values() if p.wire is not None]


def split_provider(path: str) -> tuple[str, str]:
    """Return ``(provider, API path)``: ``/p/{provider}`` names it, else ``default``."""
    if m := _PREFIX.match(path):
        return urllib.parse.unquote(m.group(1)), m.group(2)
    return DEFAULT_PROVIDER, path


def route(path: str) -> tuple[str, SimWire, RouteMatch] | None:
    """Return ``(provider, wire, match)`` for a provider API path, else None."""
    provider, rest = split_provider(path)
    for wire in wires():
        if (found := wire.match(rest)) is not None:
            return provider, wire, found
    return None


def claimant(path: str) -> SimWire:
    """Return the wire whose API ``path`` looks meant for (OpenAI when none claims it)."""
    rest = split_provider(path)[1]
    candidates = wires()
    return next((w for w in candidates if w.claims(rest)), candidates[0])


class SimulatorApp:
    """Answer provider requests from the contract catalog; obey the control API."""

    def __init__(
        self,
        profiles: Mapping[str, str] | None = None,
        default_profile: str = Profile.FAITHFUL.value,
        catalog: Any = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``catalog``: a mapping ``NAME@V`` -> contract, or a function that loads one."""
        self.default_profile = Profile(default_profile)
        self._configured = {name: Profile(p) for name, p in (profiles or {}).items()}
        self._overrides: dict[str, Profile] = {}
        self._catalog = catalog
        self._clock = clock
        self.script = Script()
        self.calls: list[CallRecord] = []
        #: Completions sent with ``store: true``, per provider, oldest first: what the
        #: simulated provider did, whether or not the client was still there to hear it.
        self.stored: dict[str, list[dict[str, Any]]] = {}
        self._seq = itertools.count(1)  # numbers the calls since the last reset
        self._served = itertools.count(1)  # never reset: keeps request ids unique
        # Request ids are unique across simulator processes too, as a real provider's are:
        # certification takes a provider id it has seen before for a replayed answer.
        self._instance = secrets.token_hex(8)
        self._closing: asyncio.Event | None = None
        #: ``replaying``: the first answer per (provider, path, request body), served again.
        self._replay_cache: dict[tuple[str, str, bytes], WireResponse] = {}

    # -- state ---------------------------------------------------------------------------

    def profile_for(self, provider: str) -> Profile:
        """Return the profile of ``provider``: override, configured, its own name, default."""
        if provider in self._overrides:
            return self._overrides[provider]
        if provider in self._configured:
            return self._configured[provider]
        if provider in Profile._value2member_map_:
            return Profile(provider)
        return self.default_profile

    def reset(self) -> None:
        """Clear scripts, the call log and profile overrides."""
        self.script.clear()
        self.calls.clear()
        self.stored.clear()
        self._overrides.clear()
        self._replay_cache.clear()
        self._seq = itertools.count(1)

    def close(self) -> None:
        """Release every request held by ``hang`` (the server is stopping)."""
        self._closing_event().set()

    def _closing_event(self) -> asyncio.Event:
        if self._closing is None:
            self._closing = asyncio.Event()
        return self._closing

    def _load_catalog(self) -> Any:
        if callable(self._catalog) and not isinstance(self._catalog, Mapping):
            self._catalog = self._catalog()  # a loader: call it once
        return {} if self._catalog is None else self._catalog

    # -- ASGI ----------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection scope."""
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = await _read_body(receive)
        path: str = scope["path"]
        method: str = scope["method"]
        if path.startswith("/_sim/"):
            await self._control(scope, method, path, body, send)
            return
        routed = route(path)
        served = f"{self._instance}:{next(self._served)}:".encode()
        request_id = hashlib.sha256(served + body).hexdigest()[:24]
        if routed is None:
            wire = claimant(path)
            await _send(send, wire.error(wire.not_found(method, path), request_id))
            return
        if method == "GET" and routed[1].protocol == "openai":
            await _send(send, self._list_stored(routed[0], routed[1], scope))
            return
        if method != "POST":
            wire = routed[1]
            await _send(send, wire.error(wire.method_not_allowed(method, path), request_id))
            return
        await self._provider_call(scope, routed, body, request_id, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                # Load the catalog before accepting requests, so the first answer does not
                # stall the event loop; a broken catalog is reported per request instead.
                with contextlib.suppress(Exception):
                    self._load_catalog()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # -- provider calls ------------------------------------------------------------------

    async def _provider_call(
        self,
        scope: Scope,
        routed: tuple[str, SimWire, RouteMatch],
        body: bytes,
        request_id: str,
        receive: Receive,
        send: Send,
    ) -> None:
        provider, wire, match = routed
        seq = next(self._seq)
        record = CallRecord(
            seq=seq,
            provider=provider,
            protocol=wire.protocol,
            path=scope["path"],
            idempotency_key=_header(scope, b"idempotency-key"),
            received_at=self._clock(),
        )
        self.calls.append(record)
        query = bytes(scope.get("query_string", b"")).decode("latin-1")
        behaviour = self.script.next_for(provider) or Behaviour(BehaviourKind.OK)
        record.behaviour = behaviour.kind.value
        try:
            await self._respond(
                record, wire, match, query, body, behaviour, request_id, receive, send
            )
        finally:
            record.finished_at = self._clock()

    async def _respond(
        self,
        record: CallRecord,
        wire: SimWire,
        match: RouteMatch,
        query: str,
        body: bytes,
        behaviour: Behaviour,
        request_id: str,
        receive: Receive,
        send: Send,
    ) -> None:
        kind = behaviour.kind
        request: WireRequest | None = None
        refused: RequestRefused | None = None
        try:
            request = wire.parse(_json_object(body), match, query)
            record.model = request.model
            record.system_prompt = bool(request.system)
            record.contract = _contract_name(request.user)
        except RequestRefused as exc:
            refused = exc
        if kind is BehaviourKind.HANG:
            if await self._hold_until_hangup(receive):
                record.outcome = "hung_up"
                return
            # The server is stopping under a held request: break the connection mid-answer,
            # as a dying provider would, rather than let the server invent a 500.
            await send({"type": "http.response.start", "status": 200, "headers": []})
            record.outcome = "dropped"
            raise DropConnection("stopping while a request hangs")
        if kind is BehaviourKind.DROP_UNPROCESSED:
            # Declare a body so the client cannot mistake the close for a complete answer.
            headers = [(b"content-type", b"application/json"), (b"content-length", b"2")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            record.outcome = "dropped_unprocessed"
            raise DropConnection("drop_unprocessed")
        if kind is BehaviourKind.DELAY:
            await asyncio.sleep(min(behaviour.seconds, MAX_DELAY))
        if kind is BehaviourKind.STATUS:
            response = wire.error(
                wire.scripted(behaviour.code), request_id, retry_after=behaviour.retry_after
            )
        elif request is None:
            assert refused is not None
            response = wire.error(refused, request_id)
        elif self.profile_for(record.provider) is Profile.REPLAYING and kind is BehaviourKind.OK:
            # A caching proxy: the key is the body, never the Idempotency-Key header.
            cache_key = (record.provider, record.path, hashlib.sha256(body).digest())
            response = self._replay_cache.get(cache_key) or self._answer(
                record, wire, request, request_id, malformed_output=False
            )
            if response.status == 200:
                self._replay_cache.setdefault(cache_key, response)
        else:
            response = self._answer(
                record, wire, request, request_id, malformed_output=kind is BehaviourKind.MALFORMED
            )
            if request.store and response.status == 200 and not response.chunks:
                self._keep(record, request, response)
        if kind is BehaviourKind.DROP_AFTER_HEADERS:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status,
                    "headers": response.headers,
                }
            )
            record.status, record.outcome = response.status, "dropped"
            raise DropConnection("drop_after_headers")
        if kind is BehaviourKind.TRUNCATED:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status,
                    "headers": response.headers,
                }
            )
            if response.chunks:  # a stream: send the first half of its events
                for chunk in response.chunks[: len(response.chunks) // 2]:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            else:
                half = response.body[: len(response.body) // 2]
                await send({"type": "http.response.body", "body": half, "more_body": True})
            record.status, record.outcome = response.status, "truncated"
            raise DropConnection("truncated")
        record.status = response.status
        record.outcome = "answered" if response.status < 400 else "error"
        await _send(send, response)

    def _answer(
        self,
        record: CallRecord,
        wire: SimWire,
        request: WireRequest,
        request_id: str,
        *,
        malformed_output: bool,
    ) -> WireResponse:
        def refuse(status: int, message: str) -> WireResponse:
            return wire.error(RequestRefused(message, status=status), request_id)

        try:
            contract_name, contract_input = extract_input(request.user)
        except InputBlockError as exc:
            return refuse(400, str(exc))
        record.contract = contract_name
        try:
            catalog = self._load_catalog()
        except Exception as exc:  # a broken catalog must not look like a provider outage
            return refuse(500, f"the contract catalog cannot be loaded: {exc}")
        contract = find_contract(catalog, contract_name)
        if contract is None:
            return refuse(400, f"unknown contract {contract_name!r}")
        try:
            if malformed_output:
                reply = malformed(contract, contract_input)
            else:
                reply = answer(
                    contract_name, contract, contract_input, self.profile_for(record.provider)
                )
        except Exception as exc:  # the contract's simulation cannot answer this input
            return refuse(
                400, f"{contract_name} cannot simulate this input: {type(exc).__name__}: {exc}"
            )
        if self.profile_for(record.provider) is Profile.OTHER_MODEL:
            request = dataclasses.replace(request, model=request.model + OTHER_MODEL_SUFFIX)
        return wire.success(request, reply, request_id, self._clock())

    def _keep(self, record: CallRecord, request: WireRequest, response: WireResponse) -> None:
        """Store a finished completion for the lookup, before it is sent (or lost)."""
        completion = json.loads(response.body)
        completion["metadata"] = dict(request.metadata or {})
        self.stored.setdefault(record.provider, []).append(completion)
        record.stored_id = str(completion["id"])

    def _list_stored(self, provider: str, wire: SimWire, scope: Scope) -> WireResponse:
        """Answer ``GET /v1/chat/completions`` as OpenAI lists stored completions."""
        pairs = urllib.parse.parse_qsl(scope.get("query_string", b"").decode())
        wanted: dict[str, str] = {}
        options: dict[str, str] = {}
        for name, value in pairs:
            if m := _METADATA_PARAM.fullmatch(name):
                wanted[m.group(1)] = value
            elif name in ("after", "limit", "order", "model"):
                options[name] = value
            else:
                return _refuse(wire, f"Unrecognized request argument supplied: {name}")
        limit_text = options.get("limit", str(LIST_DEFAULT_LIMIT))
        if not limit_text.isdigit() or not 1 <= int(limit_text) <= LIST_MAX_LIMIT:
            return _refuse(wire, f"limit must be an integer between 1 and {LIST_MAX_LIMIT}")
        order = options.get("order", "asc")
        if order not in ("asc", "desc"):
            return _refuse(wire, "order must be 'asc' or 'desc'")
        items = [
            c
            for c in self.stored.get(provider, [])
            if all(c["metadata"].get(k) == v for k, v in wanted.items())
            and options.get("model") in (None, c.get("model"))
        ]
        if order == "desc":
            items.reverse()
        if "after" in options:
            ids = [c["id"] for c in items]
            items = items[ids.index(options["after"]) + 1 :] if options["after"] in ids else []
        page = items[: int(limit_text)]
        return _plain_json(
            200,
            {
                "object": "list",
                "data": page,
                "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None,
                "has_more": len(items) > len(page),
            },
        )

    async def _hold_until_hangup(self, receive: Receive) -> bool:
        """Wait until the client hangs up (True), or the server stops or ``MAX_DELAY`` passes."""
        closing = asyncio.ensure_future(self._closing_event().wait())

        async def hangup() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        gone = asyncio.ensure_future(hangup())
        try:
            await asyncio.wait(
                {closing, gone}, timeout=MAX_DELAY, return_when=asyncio.FIRST_COMPLETED
            )
            return gone.done() and not gone.cancelled()
        finally:
            closing.cancel()
            gone.cancel()

    # -- control API ---------------------------------------------------------------------

    async def _control(self, scope: Scope, method: str, path: str, body: bytes, send: Send) -> None:
        key = (method, path)
        try:
            if key == ("GET", "/_sim/health"):
                payload: Any = {"status": "ok", "default_profile": self.default_profile.value}
            elif key == ("GET", "/_sim/calls"):
                query = urllib.parse.parse_qs(scope.get("query_string", b"").decode())
                wanted = query.get("provider", [None])[0]
                payload = {
                    "calls": [c.as_json() for c in self.calls if wanted in (None, c.provider)]
                }
            elif key == ("POST", "/_sim/script"):
                payload = self._queue_script(_json_object(body))
            elif key == ("POST", "/_sim/reset"):
                self.reset()
                payload = {"reset": True}
            elif key == ("GET", "/_sim/profiles"):
                payload = self._profiles_json()
            elif key == ("POST", "/_sim/profiles"):
                for name, value in _json_object(body).items():
                    self._overrides[str(name)] = Profile(value)
                payload = self._profiles_json()
            else:
                await _send(
                    send, _plain_json(404, {"error": f"no control endpoint {method} {path}"})
                )
                return
        except (ValueError, RequestRefused) as exc:
            await _send(send, _plain_json(400, {"error": str(exc)}))
            return
        await _send(send, _plain_json(200, payload))

    def _queue_script(self, data: dict[str, Any]) -> dict[str, Any]:
        provider = data.get("provider")
        if provider is not None and not isinstance(provider, str):
            raise ValueError("'provider' must be a provider name or null")
        raw = data.get("behaviours")
        if not isinstance(raw, list) or not raw:
            raise ValueError("'behaviours' must be a non-empty list")
        count = data.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError("'count' must be a positive integer")
        if count * len(raw) > MAX_SCRIPT_COUNT:
            raise ValueError(f"at most {MAX_SCRIPT_COUNT} behaviours per script")
        behaviours = [Behaviour.from_json(b) for b in raw]
        queued = self.script.queue(provider, behaviours, count)
        return {"queued": queued, "pending": self.script.pending()}

    def _profiles_json(self) -> dict[str, Any]:
        merged = {**{k: v.value for k, v in self._configured.items()}}
        merged.update({k: v.value for k, v in self._overrides.items()})
        return {"default": self.default_profile.value, "profiles": merged}


_METADATA_PARAM = re.compile(r"metadata\[([^\]]+)\]")
LIST_DEFAULT_LIMIT = 20  # stored completions per page when the client names no limit
LIST_MAX_LIMIT = 100  # the most one page may hold


def _refuse(wire: SimWire, message: str) -> WireResponse:
    return wire.error(RequestRefused(message, type="invalid_request_error"), "list")


def _contract_name(user: str) -> str | None:
    try:
        return extract_input(user)[0]
    except InputBlockError:
        return None


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestRefused(f"the request body is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise RequestRefused("the request body must be a JSON object")
    return data


def _plain_json(status: int, payload: Any) -> WireResponse:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    return WireResponse(status, headers, body)


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise DropConnection("request body too large")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _send(send: Send, response: WireResponse) -> None:
    await send(
        {"type": "http.response.start", "status": response.status, "headers": response.headers}
    )
    if not response.chunks:
        await send({"type": "http.response.body", "body": response.body})
        return
    for chunk in response.chunks:  # a stream: one event per body message, as SSE servers do
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


def create_sim_app(
    profiles: dict[str, str] | None = None,
    default_profile: str = "faithful",
    catalog: Any = None,
) -> SimulatorApp:
    """Build the simulator ASGI app (``catalog``: name -> contract, or a loader of one)."""
    return SimulatorApp(profiles=profiles, default_profile=default_profile, catalog=catalog)
