"""Scrubbed HTTP cassettes: ``record`` writes them, ``replay`` serves them (httpx.MockTransport).

One file per provider, contract and case: ``<root>/<provider>/<contract>/<case>.json``::

    {"format": "onejob.cassette/1", "recorded_from": "...", "provider": "faithful",
     "protocol": "openai", "model": "sim-gpt", "contract": "ticket-triage@1",
     "contract_fingerprint": "...", "case": "...", "recorded_at": "...Z",
     "interactions": [{"request": {"method", "path", "headers", "body"},
                       "response": {"status", "headers", "body"}}]}

Secrets never reach a cassette: auth headers are dropped, ``key=`` query parameters
removed, and any occurrence of a configured API key in a URL or body is replaced.
A replayed request must match its recording (method, path, JSON body); anything else
raises ``CassetteMismatch`` rather than answering with another case's response.
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime as dt
import json
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx

FORMAT = "onejob.cassette/1"
#: The committed cassettes (``certify/recorded/``), shipped so replay works offline.
CASSETTE_ROOT = Path(__file__).parent / "recorded"
SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
        "openai-organization",
        "openai-project",
    }
)
SECRET_QUERY = frozenset({"key", "api_key", "apikey", "access_token"})
#: Headers kept in a cassette (the rest is noise that changes on every run).
KEPT_REQUEST_HEADERS = frozenset({"content-type", "anthropic-version"})
KEPT_RESPONSE_HEADERS = frozenset({"content-type", "x-request-id", "request-id"})
REDACTED = "<redacted>"


class CassetteMismatch(Exception):
    """A replayed request does not match its cassette (or there is no cassette)."""


class CassetteMissing(CassetteMismatch):
    """No cassette was recorded for this provider, contract and case."""


@dataclasses.dataclass(slots=True)
class Tape:
    """The HTTP exchanges of one case, recorded or to be replayed."""

    provider: str
    contract: str
    case: str
    interactions: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    position: int = 0  #: the next interaction replay serves


#: The tape of the case the current task is running (set by the runner per case).
CURRENT_TAPE: contextvars.ContextVar[Tape | None] = contextvars.ContextVar(
    "onejob_current_tape", default=None
)


def cassette_path(root: Path, provider: str, contract: str, case: str) -> Path:
    """Return where the cassette of one case lives."""
    return Path(root) / provider / contract / f"{case}.json"


def scrub_text(text: str, secrets: Iterable[str]) -> str:
    """Replace every secret in ``text``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text


def scrub_path(url: httpx.URL, secrets: Iterable[str]) -> str:
    """Return the URL path and query without secret query parameters or secrets."""
    parts = urlsplit(str(url))
    query = [(k, v) for k, v in parse_qsl(parts.query) if k.lower() not in SECRET_QUERY]
    path = parts.path + (f"?{urlencode(query)}" if query else "")
    return scrub_text(path, secrets)


def scrub_headers(
    headers: httpx.Headers, keep: frozenset[str], secrets: Iterable[str]
) -> dict[str, str]:
    """Return the kept, non-secret headers with any secret value replaced."""
    return {
        k.lower(): scrub_text(v, secrets)
        for k, v in headers.items()
        if k.lower() in keep and k.lower() not in SECRET_HEADERS
    }


def _body(content: bytes, secrets: Iterable[str]) -> Any:
    text = scrub_text(content.decode("utf-8", "replace"), secrets)
    try:
        return json.loads(text)
    except ValueError:
        return {"__text__": text}


class RecordingTransport(httpx.AsyncBaseTransport):
    """Pass requests to a real transport and append each scrubbed exchange to the case's tape."""

    def __init__(self, inner: httpx.AsyncBaseTransport, secrets: Iterable[str] = ()) -> None:
        self.inner = inner
        self.secrets = tuple(s for s in secrets if s)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send the request, record the exchange, and return the response."""
        content = await request.aread()
        response = await self.inner.handle_async_request(request)
        body = await response.aread()
        await response.aclose()
        tape = CURRENT_TAPE.get()
        if tape is not None:
            tape.interactions.append(
                {
                    "request": {
                        "method": request.method,
                        "path": scrub_path(request.url, self.secrets),
                        "headers": scrub_headers(
                            request.headers, KEPT_REQUEST_HEADERS, self.secrets
                        ),
                        "body": _body(content, self.secrets),
                    },
                    "response": {
                        "status": response.status_code,
                        "headers": scrub_headers(
                            response.headers, KEPT_RESPONSE_HEADERS, self.secrets
                        ),
                        "body": _body(body, self.secrets),
                    },
                }
            )
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            content=body,
            request=request,
        )

    async def aclose(self) -> None:
        """Close the real transport."""
        await self.inner.aclose()


def write_cassette(root: Path, tape: Tape, meta: dict[str, Any]) -> Path:
    """Write one case's tape as a cassette file and return its path."""
    path = cassette_path(root, tape.provider, tape.contract, tape.case)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "format": FORMAT,
        **meta,
        "provider": tape.provider,
        "contract": tape.contract,
        "case": tape.case,
        "recorded_at": dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z"),
        "interactions": tape.interactions,
    }
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False, sort_keys=True) + "\n", "utf-8")
    return path


def first_difference(recorded: Any, sent: Any, where: str = "") -> str | None:
    """Return where two JSON values first differ, or None when they are equal."""
    here = where or "(body)"
    if isinstance(recorded, dict) and isinstance(sent, dict):
        for key in sorted(set(recorded) | set(sent)):
            if key not in sent:
                return f"{where}/{key}: recorded but not sent"
            if key not in recorded:
                return f"{where}/{key}: sent but not recorded"
            diff = first_difference(recorded[key], sent[key], f"{where}/{key}")
            if diff:
                return diff
        return None
    if isinstance(recorded, list) and isinstance(sent, list):
        if len(recorded) != len(sent):
            return f"{here}: {len(recorded)} item(s) recorded, {len(sent)} sent"
        for i, (a, b) in enumerate(zip(recorded, sent, strict=True)):
            diff = first_difference(a, b, f"{where}/{i}")
            if diff:
                return diff
        return None
    if recorded != sent:
        return f"{here}: recorded {_short(recorded)}, sent {_short(sent)}"
    return None


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


class CassetteLibrary:
    """Serve recorded cassettes to an ``httpx.AsyncClient`` through ``httpx.MockTransport``."""

    def __init__(self, root: Path = CASSETTE_ROOT, secrets: Iterable[str] = ()) -> None:
        self.root = Path(root)
        self.secrets = tuple(s for s in secrets if s)
        self._cache: dict[Path, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def client(self) -> httpx.AsyncClient:
        """Return a client whose every request is answered from the cassettes."""
        return httpx.AsyncClient(transport=httpx.MockTransport(self._serve))

    def load(self, provider: str, contract: str, case: str) -> dict[str, Any]:
        """Return the cassette of one case (raise ``CassetteMissing`` when absent)."""
        path = cassette_path(self.root, provider, contract, case)
        with self._lock:
            if path not in self._cache:
                try:
                    doc = json.loads(path.read_text("utf-8"))
                except FileNotFoundError:
                    raise CassetteMissing(
                        f"no cassette for {provider}/{contract}/{case} (looked at {path}); "
                        "record one with --mode record"
                    ) from None
                if doc.get("format") != FORMAT or not doc.get("interactions"):
                    raise CassetteMismatch(f"{path}: not a {FORMAT} cassette with interactions")
                self._cache[path] = doc
            return self._cache[path]

    def _serve(self, request: httpx.Request) -> httpx.Response:
        tape = CURRENT_TAPE.get()
        if tape is None:
            raise CassetteMismatch(f"replay got {request.method} {request.url.path} outside a case")
        doc = self.load(tape.provider, tape.contract, tape.case)
        interactions = doc["interactions"]
        recorded = interactions[tape.position % len(interactions)]
        tape.position += 1
        where = f"cassette {tape.provider}/{tape.contract}/{tape.case}"
        want, sent_body = recorded["request"], _body(request.content, self.secrets)
        sent_path = scrub_path(request.url, self.secrets)
        if request.method != want["method"] or sent_path != want["path"]:
            raise CassetteMismatch(
                f"{where}: request {request.method} {sent_path} does not match the recorded "
                f"{want['method']} {want['path']}"
            )
        diff = first_difference(want["body"], sent_body)
        if diff is not None:
            raise CassetteMismatch(f"{where}: request body does not match the recording at {diff}")
        reply = recorded["response"]
        body = reply["body"]
        content = (
            body["__text__"].encode()
            if isinstance(body, dict) and set(body) == {"__text__"}
            else json.dumps(body, ensure_ascii=False).encode()
        )
        return httpx.Response(reply["status"], headers=reply.get("headers", {}), content=content)
