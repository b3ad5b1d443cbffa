"""The language free text is written in, detected offline (lingua, models inside the wheel).

A contract declares per free-text field which language it must be written in: a fixed one
(``value = "en"``) or the one an input field names (``input = "$.language"``), as a
``language`` assertion (``contracts.assertions``). The language ``code`` fields of an
output say what the model *claims*; this checks what it *wrote*.

The detector knows only ``DETECTABLE`` (a restricted set keeps it small: about 2 s and
300 MB to load its models once per process, then well under a millisecond per field).
Load them (``detector()``) before any call is in flight: the loading holds the GIL, so
even ``ready()``'s worker thread stalls the event loop, and an in-process simulator on it.
It judges a text only when it has at least ``MIN_LETTERS`` letters, and refuses it only
when the expected language is neither the most likely one nor at least ``MIN_CONFIDENCE`` likely,
so names, order ids and product words in another language do not fail a faithful answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
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
_detector: LanguageDetector | None = None


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


def detector() -> LanguageDetector:
    """Return the process-wide detector, loading its models on first use."""
    global _detector
    with _lock:
        if _detector is None:
            languages = [Language.from_iso_code_639_1(IsoCode639_1.from_str(c)) for c in DETECTABLE]
            builder = LanguageDetectorBuilder.from_languages(*languages)
            _detector = builder.with_preloaded_language_models().build()
        return _detector


async def ready() -> None:
    """Load the detector's models in a worker thread (once per process)."""
    if _detector is None:
        await asyncio.to_thread(detector)


def judge(text: str, expected: str) -> LanguageVerdict:
    """Say whether ``text`` is written in ``expected`` (an ISO 639-1 code)."""
    expected = check_code(expected)
    if sum(ch.isalpha() for ch in text) < MIN_LETTERS:
        return LanguageVerdict(True, expected, None, 0.0)
    values = detector().compute_language_confidence_values(text)
    shares = {v.language.iso_code_639_1.name.lower(): v.value for v in values}
    top = max(shares, key=lambda code: shares[code]) if shares else None
    mine = shares.get(expected, 0.0)
    ok = top is None or top == expected or mine >= MIN_CONFIDENCE
    return LanguageVerdict(ok, expected, top, mine, shares.get(top, 0.0) if top else 0.0)
