"""The control API (``/_sim/*``) and the state it reads and changes.

::

    GET  /_sim/health    GET /_sim/calls[?provider=]    POST /_sim/script    POST /_sim/reset
    GET|POST /_sim/profiles    GET|POST /_sim/limits    GET|POST /_sim/outage

``SimulatorState`` is everything a run of the simulator remembers: the profiles (set at
start, then overridden), the scripted behaviours still queued, the call log, the stored
completions, the ``replaying`` profile's answers, and the rate limits and outages it plays
(``providers.simulator.limits``); ``reset`` clears all but the profiles set at start.
``SimulatorApp`` (``providers.simulator.app``) serves provider calls on top of it; its
client is ``providers.simulator.control_client``.
"""

from __future__ import annotations

import itertools
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from providers.base import RequestRefused
from providers.sim_wire import WireResponse
from providers.simulator.asgi import json_object, plain_json
from providers.simulator.limits import Throttles
from providers.simulator.profiles import Profile
from providers.simulator.script import MAX_SCRIPT_COUNT, Behaviour, CallRecord, Script
from providers.simulator.stored import StoredCompletions

#: Every profile's name (a provider named like one plays it).
PROFILE_NAMES = frozenset(p.value for p in Profile)


class SimulatorState:
    """Profiles, the script, the call log and stored completions of one simulator."""

    def __init__(
        self,
        profiles: Mapping[str, str] | None = None,
        default_profile: str = Profile.FAITHFUL.value,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.default_profile = Profile(default_profile)
        self._configured = {name: Profile(p) for name, p in (profiles or {}).items()}
        self._overrides: dict[str, Profile] = {}
        self.script = Script()
        self.calls: list[CallRecord] = []
        #: Completions sent with ``store: true``, per provider, oldest first: what the
        #: simulated provider did, whether or not the client was still there to hear it.
        self.stored: StoredCompletions = {}
        self._seq = itertools.count(1)  # numbers the calls since the last reset
        #: ``replaying``: the first answer per (provider, path, request body), served again.
        self._replay_cache: dict[tuple[str, str, bytes], WireResponse] = {}
        #: The rate limits and outages set through the control API, per provider.
        self.throttles = Throttles(monotonic)

    def profile_for(self, provider: str) -> Profile:
        """Return the profile of ``provider``: override, configured, its own name, default."""
        if provider in self._overrides:
            return self._overrides[provider]
        if provider in self._configured:
            return self._configured[provider]
        if provider in PROFILE_NAMES:
            return Profile(provider)
        return self.default_profile

    def reset(self) -> None:
        """Clear scripts, the call log, profile overrides, rate limits and outages."""
        self.script.clear()
        self.throttles.clear()
        self.calls.clear()
        self.stored.clear()
        self._overrides.clear()
        self._replay_cache.clear()
        self._seq = itertools.count(1)

    def control(self, method: str, path: str, query_string: bytes, body: bytes) -> WireResponse:
        """Answer one ``/_sim/*`` request."""
        key = (method, path)
        try:
            if key == ("GET", "/_sim/health"):
                payload: Any = {"status": "ok", "default_profile": self.default_profile.value}
            elif key == ("GET", "/_sim/calls"):
                query = urllib.parse.parse_qs(query_string.decode())
                wanted = query.get("provider", [None])[0]
                payload = {
                    "calls": [c.as_json() for c in self.calls if wanted in (None, c.provider)]
                }
            elif key == ("POST", "/_sim/script"):
                payload = self._queue_script(json_object(body))
            elif key == ("POST", "/_sim/reset"):
                self.reset()
                payload = {"reset": True}
            elif key == ("GET", "/_sim/limits"):
                payload = self.throttles.limits_json()
            elif key == ("POST", "/_sim/limits"):
                payload = self.throttles.set_limit(json_object(body))
            elif key == ("GET", "/_sim/outage"):
                payload = self.throttles.outages_json()
            elif key == ("POST", "/_sim/outage"):
                payload = self.throttles.set_outage(json_object(body))
            elif key == ("GET", "/_sim/profiles"):
                payload = self._profiles_json()
            elif key == ("POST", "/_sim/profiles"):
                for name, value in json_object(body).items():
                    self._overrides[str(name)] = Profile(value)
                payload = self._profiles_json()
            else:
                return plain_json(404, {"error": f"no control endpoint {method} {path}"})
        except (ValueError, RequestRefused) as exc:
            return plain_json(400, {"error": str(exc)})
        return plain_json(200, payload)

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
