"""Which model answered: the configured model, one of its snapshots or aliases, or another one.

Real APIs answer with the model that served the call, and that is rarely the string sent:
OpenAI answers ``gpt-4o`` with the dated snapshot ``gpt-4o-2024-08-06``, Anthropic answers
``claude-3-5-sonnet-latest`` with ``claude-3-5-sonnet-20241022``, Gemini reports
``gemini-2.0-flash-001`` as ``modelVersion``, Ollama reports ``llama3`` as
``llama3:latest``. ``model_matches`` accepts exactly those per-protocol spellings of the
configured model (each plug-in declares its ``snapshot_suffix`` and
``reported_model_prefix``, ``providers.plugin``), plus the aliases a provider's
configuration declares, and refuses every other name: a silent downgrade (``gpt-4o``
answered by ``gpt-4o-mini-2024-07-18``) is another model, however similar the prefix.

Used by certification (a mismatch fails the transport layer) and by the gateway (the
reporting model is recorded on the attempt and a mismatch is counted); it is a pure
function so both can share it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from providers.registry import PLUGINS

#: Alias suffixes that name "the newest snapshot": stripped before the snapshot rule applies.
ALIAS_SUFFIXES = ("-latest",)


@dataclasses.dataclass(frozen=True, slots=True)
class ModelIdentity:
    """Whether the reported model is the configured one, and why."""

    matches: bool
    configured: str
    reported: str | None
    #: ``exact``, ``snapshot``, ``alias``; or why not: ``not reported``, ``other model``.
    rule: str

    @property
    def reason(self) -> str:
        """Return one sentence saying what was compared and what was decided."""
        if self.rule == "not reported":
            return f"the provider did not say which model answered (configured {self.configured!r})"
        if not self.matches:
            return (
                f"model mismatch: configured {self.configured!r}, the provider reported "
                f"{self.reported!r}, which is neither a snapshot nor a declared alias of it"
            )
        return f"{self.reported!r} is the configured {self.configured!r} ({self.rule})"


def model_matches(
    protocol: str, configured: str, reported: str | None, aliases: Iterable[str] = ()
) -> ModelIdentity:
    """Say whether ``reported`` is ``configured``, one of its snapshots, or a declared alias."""
    if not reported:
        return ModelIdentity(False, configured, reported, "not reported")
    if reported == configured:
        return ModelIdentity(True, configured, reported, "exact")
    if reported in set(aliases):
        return ModelIdentity(True, configured, reported, "alias")
    plugin = PLUGINS.get(protocol)
    # A prefix the provider may add (Gemini's modelVersion: "models/...").
    name = reported.removeprefix(plugin.reported_model_prefix) if plugin else reported
    base = configured
    for suffix in ALIAS_SUFFIXES:
        base = base.removesuffix(suffix)
    suffix_rule = plugin.snapshot_suffix if plugin else None
    if name == base:
        return ModelIdentity(True, configured, reported, "snapshot")
    if suffix_rule is not None and name.startswith(base):
        if suffix_rule.fullmatch(name[len(base) :]):
            return ModelIdentity(True, configured, reported, "snapshot")
    return ModelIdentity(False, configured, reported, "other model")
