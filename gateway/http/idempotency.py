"""Parse the ``Idempotency-Key`` header (DESIGN R1).

Accepted: an RFC 8941 sf-string (``"abc"``, with ``\\"`` and ``\\\\`` escapes) or a bare
token (RFC 9110 ``tchar`` plus ``:`` and ``/``, so UUIDs and ULIDs work unquoted). The key
is 1-255 printable ASCII characters once unquoted. Anything else - parameters, an inner
list, two values (two header lines or a comma-joined line) - is rejected.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.errors import InvalidIdempotencyKey

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255  # characters, after unquoting
_OWS = " \t"
_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_TOKEN_CHARS = _TCHAR | {":", "/"}


def parse_idempotency_key(values: Sequence[str]) -> str:
    """Return the key carried by the header lines ``values``; raise ``InvalidIdempotencyKey``."""
    if not values:
        raise InvalidIdempotencyKey("Idempotency-Key header is required.")
    if len(values) > 1:
        raise InvalidIdempotencyKey("Idempotency-Key header was given more than once.")
    raw = values[0].strip(_OWS)
    if not raw:
        raise InvalidIdempotencyKey("Idempotency-Key header is empty.")
    key, rest = _parse_string(raw) if raw[0] == '"' else _parse_token(raw)
    rest = rest.lstrip(_OWS)
    if rest.startswith(","):
        raise InvalidIdempotencyKey("Idempotency-Key header carries more than one value.")
    if rest:
        raise InvalidIdempotencyKey(
            "Idempotency-Key must be a single sf-string or token, without parameters."
        )
    if not 1 <= len(key) <= MAX_KEY_LENGTH:
        raise InvalidIdempotencyKey(
            f"Idempotency-Key must be 1-{MAX_KEY_LENGTH} characters, got {len(key)}."
        )
    return key


def _parse_string(raw: str) -> tuple[str, str]:
    """Unquote an sf-string at the start of ``raw``; return it and the remainder."""
    out: list[str] = []
    i = 1
    while i < len(raw):
        ch = raw[i]
        if ch == "\\":
            if i + 1 >= len(raw) or raw[i + 1] not in '"\\':
                raise InvalidIdempotencyKey('Only \\" and \\\\ may be escaped in Idempotency-Key.')
            out.append(raw[i + 1])
            i += 2
            continue
        if ch == '"':
            return "".join(out), raw[i + 1 :]
        if not " " <= ch <= "~":
            raise InvalidIdempotencyKey("Idempotency-Key must be printable ASCII.")
        out.append(ch)
        i += 1
    raise InvalidIdempotencyKey("Idempotency-Key has an unterminated string.")


def _parse_token(raw: str) -> tuple[str, str]:
    """Take a bare token from the start of ``raw``; return it and the remainder."""
    i = 0
    while i < len(raw) and raw[i] in _TOKEN_CHARS:
        i += 1
    if i == 0 or (i < len(raw) and raw[i] not in _OWS + ",;"):
        raise InvalidIdempotencyKey(
            "Idempotency-Key must be an sf-string or a token of printable ASCII."
        )
    return raw[:i], raw[i:]
