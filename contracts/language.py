"""The language free text is written in, detected offline (lingua, models inside the wheel).

A contract declares per free-text field which language it must be written in: a fixed one
(``value = "en"``) or the one an input field names (``input = "$.language"``), as a
``language`` assertion (``contracts.assertions``). The language ``code`` fields of an
output say what the model *claims*; this checks what it *wrote*.

The detector knows only ``DETECTABLE`` (a restricted set keeps it fast: about 2 s to load
the models once per process, then well under a millisecond per field). It judges a text
only when it has at least ``MIN_LETTERS`` letters, and refuses it only when the
expected language is neither the most likely one nor at least ``MIN_CONFIDENCE`` likely,
so names, order ids and product words in another language do not fail a faithful answer.
"""

from __future__ import annotations

import dataclasses
import functools
import threading

from lingua import IsoCode639_1, Language, LanguageDetector, LanguageDetectorBuilder

#: ISO 639-1 codes the detector tells apart (the catalog's languages and their neighbours).
DETECTABLE = ("en", "de", "es", "fr", "pt", "it", "nl", "ja", "ar")
MIN_LETTERS = 12  # below this a text is too short to judge
MIN_CONFIDENCE = 0.25  # the expected language's share below which the text is refused
NAMES = {
    "en": "English",
    "de": "German",
    "es": "Spanish",
    "fr": "French",
    "pt": "Portuguese",
    "it": "Italian",
    "nl": "Dutch",
    "ja": "Japanese",
    "ar": "Arabic",
}

_lock = threading.Lock()


class UnknownLanguage(ValueError):
    """A language code the detector cannot check."""


@dataclasses.dataclass(frozen=True, slots=True)
class LanguageVerdict:
    """What the detector found for one text."""

    ok: bool
    expected: str  #: ISO 639-1
    detected: str | None  #: the most likely language, ISO 639-1 (None: too short to judge)
    confidence: float  #: of the expected language, 0..1
    top_confidence: float = 0.0  #: of the detected language

    def describe(self, where: str) -> str:
        """Return one sentence naming what was found and what was expected."""
        if self.detected is None:
            return f"{where} is too short to judge its language"
        return (
            f"{where} is written in {name(self.detected)} ({self.detected}, "
            f"{self.top_confidence:.2f}), expected {name(self.expected)} "
            f"({self.expected}, {self.confidence:.2f})"
        )


def name(code: str) -> str:
    """Return the English name of a language code."""
    return NAMES.get(code, code)


def check_code(code: str) -> str:
    """Return ``code`` lower-cased, or raise ``UnknownLanguage`` if it cannot be detected."""
    low = code.strip().lower()
    if low not in DETECTABLE:
        raise UnknownLanguage(
            f"language {code!r} cannot be detected (detectable: {', '.join(DETECTABLE)})"
        )
    return low


@functools.cache
def detector() -> LanguageDetector:
    """Return the process-wide detector (models load on first use)."""
    languages = [Language.from_iso_code_639_1(IsoCode639_1.from_str(c)) for c in DETECTABLE]
    return LanguageDetectorBuilder.from_languages(*languages).build()


def judge(text: str, expected: str) -> LanguageVerdict:
    """Say whether ``text`` is written in ``expected`` (an ISO 639-1 code)."""
    expected = check_code(expected)
    if sum(ch.isalpha() for ch in text) < MIN_LETTERS:
        return LanguageVerdict(True, expected, None, 0.0)
    with _lock:  # the lazy model loading is not documented as thread safe
        values = detector().compute_language_confidence_values(text)
    shares = {v.language.iso_code_639_1.name.lower(): v.value for v in values}
    top = max(shares, key=lambda code: shares[code]) if shares else None
    mine = shares.get(expected, 0.0)
    ok = top is None or top == expected or mine >= MIN_CONFIDENCE
    return LanguageVerdict(ok, expected, top, mine, shares.get(top, 0.0) if top else 0.0)
