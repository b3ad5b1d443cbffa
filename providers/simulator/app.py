"""The simulator as a plain ASGI application: provider calls answered, misbehaviour on cue.

Paths: ``/p/{provider}`` in front of the real API path names the simulated provider; without
it the provider is ``default``::

    POST [/p/{provider}]/v1/chat/completions                  OpenAI (and compatible)
    GET  [/p/{provider}]/v1/chat/completions?metadata[k]=v    OpenAI stored completions
    POST [/p/{provider}]/v1/messages                          Anthropic
    POST [/p/{provider}]/v1beta/models/{model}:generateContent Gemini (also /v1/models/...)
    POST [/p/{provider}]/v1beta/models/{model}:streamGenerateContent[?alt=sse]

Each wire format comes from its protocol's plug-in (``providers.registry``); a path nobody
answers gets a 404 in the envelope of the API it looks meant for. The contract catalog is
injected (``catalog=``) by whoever starts the simulator; the simulator imports none. Beside
this module: the raw ASGI it is written against (``asgi``), the control API ``/_sim/*``
and the state it changes (``control_routes``), the rate limits and outages it plays
(``limits``: a call turned away by either is answered without being run), the stored
completions (``stored``), the scripted behaviours and the call log (``script``), how a
profile answers (``profiles``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import itertools
import re
import secrets
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from providers.base import RequestRefused
from providers.capacity import OVERLOAD_STATUSES
from providers.registry import PLUGINS
from providers.sim_wire import RouteMatch, SimWire, WireRequest, WireResponse, with_headers
from providers.simulator.asgi import (
    DropConnection,
    Receive,
    Scope,
    Send,
    header,
    json_object,
    read_body,
    send_response,
)
from providers.simulator.control_routes import SimulatorState
from providers.simulator.profiles import (
    OTHER_MODEL_SUFFIX,
    InputBlockError,
    Profile,
    answer,
    extract_input,
    find_contract,
    malformed,
)
from providers.simulator.script import MAX_DELAY, Behaviour, BehaviourKind, CallRecord
from providers.simulator.stored import keep, list_stored

DEFAULT_PROVIDER = "default"

_PREFIX = re.compile(r"^/p/([^/]+)(/.*)$")


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


class SimulatorApp(SimulatorState):
    """Answer provider requests from the contract catalog; obey the control API."""

    def __init__(
        self,
        profiles: Mapping[str, str] | None = None,
        default_profile: str = Profile.FAITHFUL.value,
        catalog: Any = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``catalog``: a mapping ``NAME@V`` -> contract, or a function that loads one;
        ``clock`` the Unix time answers carry, ``monotonic`` the one limits run on."""
        super().__init__(profiles, default_profile, monotonic)
        self._catalog = catalog
        self._clock = clock
        self._served = itertools.count(1)  # never reset: keeps request ids unique
        # Request ids are unique across simulator processes too, as a real provider's are:
        # certification takes a provider id it has seen before for a replayed answer.
        self._instance = secrets.token_hex(8)
        self._closing: asyncio.Event | None = None

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
        body = await read_body(receive)
        path: str = scope["path"]
        method: str = scope["method"]
        if path.startswith("/_sim/"):
            query_string = bytes(scope.get("query_string", b""))
            await send_response(send, self.control(method, path, query_string, body))
            return
        routed = route(path)
        served = f"{self._instance}:{next(self._served)}:".encode()
        request_id = hashlib.sha256(served + body).hexdigest()[:24]
        if routed is None:
            wire = claimant(path)
            await send_response(send, wire.error(wire.not_found(method, path), request_id))
            return
        # A reconcilable protocol's stored answers are listed (OpenAI's stored completions).
        if method == "GET" and PLUGINS[routed[1].protocol].reconcilable:
            query_string = scope.get("query_string", b"")
            await send_response(send, list_stored(self.stored, routed[0], routed[1], query_string))
            return
        if method != "POST":
            wire = routed[1]
            await send_response(send, wire.error(wire.method_not_allowed(method, path), request_id))
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
            idempotency_key=header(scope, b"idempotency-key"),
            received_at=self._clock(),
            traceparent=header(scope, b"traceparent"),
        )
        self.calls.append(record)
        try:
            limit_headers = await self._admit(record, wire, request_id, send)
            if limit_headers is None:
                return
            query = bytes(scope.get("query_string", b"")).decode("latin-1")
            behaviour = self.script.next_for(provider) or Behaviour(BehaviourKind.OK)
            record.behaviour = behaviour.kind.value
            await self._respond(
                record,
                wire,
                match,
                query,
                body,
                behaviour,
                request_id,
                receive,
                send,
                limit_headers,
            )
        finally:
            record.finished_at = self._clock()

    async def _admit(
        self, record: CallRecord, wire: SimWire, request_id: str, send: Send
    ) -> list[tuple[str, str]] | None:
        """Let a call through, or answer an outage or a spent rate limit without running it.

        Return the headers the answer of a call let through carries (its bucket's, after
        it took a token; none without a limit), or None when the call was answered here.
        """
        outage = self.throttles.outage(record.provider)
        if outage is not None:
            record.behaviour = "outage"
            if outage.code == 429:
                response = wire.rate_limited(request_id, outage.retry_after)
            else:
                response = wire.overloaded(request_id, outage.code, outage.retry_after)
        else:
            admitted, window = self.throttles.admit(record.provider, self._clock())
            if window is None:
                return []
            if admitted:
                return wire.limit_headers(window)
            record.behaviour = "rate_limited"
            response = wire.rate_limited(request_id, window.retry_after_s, window)
        record.status, record.outcome = response.status, "error"
        await send_response(send, response)
        return None

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
        limit_headers: list[tuple[str, str]],
    ) -> None:
        kind = behaviour.kind
        request: WireRequest | None = None
        refused: RequestRefused | None = None
        try:
            request = wire.parse(json_object(body), match, query)
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
            closing = self._closing_event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(closing.wait(), min(behaviour.seconds, MAX_DELAY))
            if closing.is_set():  # stopping mid-delay: break the connection, as above
                await send({"type": "http.response.start", "status": 200, "headers": []})
                record.outcome = "dropped"
                raise DropConnection("stopping during a delay")
        if kind is BehaviourKind.STATUS:
            response = _scripted_status(wire, behaviour, request_id)
        elif kind is BehaviourKind.QUOTA:
            response = wire.quota_exhausted(request_id)
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
                keep(self.stored, record, request, response)
        response = with_headers(response, limit_headers)
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
        await send_response(send, response)

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


def _scripted_status(wire: SimWire, behaviour: Behaviour, request_id: str) -> WireResponse:
    """Answer a scripted status: 429 and the overloads in the API's own shapes for them."""
    code, retry_after = behaviour.code, behaviour.retry_after
    if code == 429:
        return wire.rate_limited(request_id, retry_after)
    if code in OVERLOAD_STATUSES:
        return wire.overloaded(request_id, code, retry_after)
    return wire.error(wire.scripted(code), request_id, retry_after=retry_after)


def _contract_name(user: str) -> str | None:
    try:
        return extract_input(user)[0]
    except InputBlockError:
        return None


def create_sim_app(
    profiles: dict[str, str] | None = None,
    default_profile: str = "faithful",
    catalog: Any = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> SimulatorApp:
    """Build the simulator ASGI app (``catalog``: name -> contract, or a loader of one;
    ``monotonic``: the clock its rate limits and outages run on)."""
    return SimulatorApp(
        profiles=profiles, default_profile=default_profile, catalog=catalog, monotonic=monotonic
    )
