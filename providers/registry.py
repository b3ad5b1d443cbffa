"""The wire protocols a provider may speak, each a plug-in, listed here by name.

A new protocol is its plug-in (a module or package defining ``PLUGIN``, see
``providers.plugin``) and one line in ``PLUGINS`` below; nothing else names it. Everything
that differs by protocol asks this registry: the config's ``protocol`` and ``reconcile``
checks (``providers.config``), the factory (``providers.factory``), the model-identity rule
(``providers.model_identity``), the tokenizer choice (``providers.tokenizers``), the render
check's system-placement rule (``certify.checks``), the preflight's base-URL hint
(``certify.preflight``) and the simulator (``providers.simulator``).
"""

from __future__ import annotations

from providers import anthropic, gemini, openai, openai_compatible
from providers.plugin import ProtocolPlugin

#: Every registered plug-in by protocol name, in this order (the simulator's wires too:
#: a path no wire claims is answered in the first one's envelope, OpenAI's).
PLUGINS: dict[str, ProtocolPlugin] = {
    plugin.name: plugin
    for plugin in (
        openai.PLUGIN,
        anthropic.PLUGIN,
        gemini.PLUGIN,
        openai_compatible.PLUGIN,
    )
}

#: The protocols a provider may name, in registry order (what ``protocol`` is checked
#: against; the checks read ``PLUGINS`` itself).
PROTOCOLS: tuple[str, ...] = tuple(PLUGINS)
#: Protocols whose API can later be asked whether it did an attempt's work.
RECONCILABLE_PROTOCOLS: frozenset[str] = frozenset(
    name for name, plugin in PLUGINS.items() if plugin.reconcilable
)


def plugin_for(protocol: str) -> ProtocolPlugin:
    """Return the plug-in of ``protocol``; raise ``ValueError`` for an unknown one."""
    try:
        return PLUGINS[protocol]
    except KeyError:
        raise ValueError(f"unknown provider protocol {protocol!r}") from None
