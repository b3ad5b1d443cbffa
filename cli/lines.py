"""How the commands fit a sentence to a line: cut at the end of a word, and say so."""

from __future__ import annotations

ELLIPSIS = "…"


def clipped(text: str, limit: int) -> str:
    """Return ``text`` in at most ``limit`` characters, cut after a whole word, with "…"."""
    if len(text) <= limit:
        return text
    cut = text[: limit - len(ELLIPSIS)]
    space = cut.rfind(" ")
    if space > limit // 2:  # a word boundary near the end; else one long word is cut
        cut = cut[:space]
    return cut.rstrip(" ,;:") + ELLIPSIS
