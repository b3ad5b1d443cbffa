"""Fit a sentence to a line: cut after a whole word, and say so (the commands' progress
lines and summaries, a scenario check's detail)."""

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
