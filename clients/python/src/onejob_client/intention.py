"""An intention: what one person wants done once, and the Idempotency-Key that says so.

The key is made when the intention is made (when the form is shown, when the order row is
written), not when a request is sent: every request for this intention, the first and
every retry, after a timeout, a crash or a restart, carries the same key and the same
body. A new key means a new job. Keep the intention (``to_json``) wherever the intention
itself lives, before the first request leaves.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import uuid
from typing import Any

MAX_KEY_LENGTH = 255  # characters, printable ASCII (docs/api.md)


def new_key() -> str:
    """Return a fresh random Idempotency-Key (a UUID4)."""
    return str(uuid.uuid4())


def check_key(key: str) -> str:
    """Return ``key`` if onejob accepts it as an Idempotency-Key, else raise ValueError."""
    if not 1 <= len(key) <= MAX_KEY_LENGTH:
        raise ValueError(f"an Idempotency-Key has 1-{MAX_KEY_LENGTH} characters")
    if not all(" " <= ch <= "~" for ch in key):
        raise ValueError("an Idempotency-Key is printable ASCII")
    return key


def key_header(key: str) -> str:
    """Return ``key`` as an RFC 8941 sf-string, which carries any printable ASCII key."""
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclasses.dataclass(frozen=True)
class Intention:
    """One job's worth of wanting: contract, input, provider, and its key."""

    contract: str
    input: dict[str, Any]
    provider: str | None = None  #: None: the contract route's primary
    key: str = dataclasses.field(default_factory=new_key)
    #: The body sent on every try, made once: the same bytes for every retry.
    body: bytes = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_key(self.key)
        # A copy: changing the caller's dict afterwards must not change the intention.
        object.__setattr__(self, "input", copy.deepcopy(self.input))
        document: dict[str, Any] = {"contract": self.contract, "input": self.input}
        if self.provider is not None:
            document["provider"] = self.provider
        body = json.dumps(document, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
        object.__setattr__(self, "body", body.encode("utf-8"))

    @classmethod
    def new(
        cls,
        contract: str,
        input: dict[str, Any],
        provider: str | None = None,
        *,
        key: str | None = None,
    ) -> Intention:
        """Make an intention now, with a new key unless the caller brings one."""
        return cls(contract, input, provider, key if key is not None else new_key())

    def to_dict(self) -> dict[str, Any]:
        """Return what to store to resume this intention after a restart."""
        return {
            "key": self.key,
            "contract": self.contract,
            "input": self.input,
            "provider": self.provider,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Intention:
        """Rebuild a stored intention: same key, same body."""
        return cls(data["contract"], data["input"], data.get("provider"), data["key"])

    def to_json(self) -> str:
        """Return ``to_dict`` as JSON."""
        return json.dumps(self.to_dict(), ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Intention:
        """Rebuild an intention stored with ``to_json``."""
        return cls.from_dict(json.loads(text))
