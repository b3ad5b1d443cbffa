"""The wire protocols a provider may speak, each a plug-in, listed here by name.

A new protocol is its plug-in (a module or package defining ``PLUGIN``, see
``providers.plugin``), one line in ``PLUGINS`` below, and its name in
``providers.config.PROTOCOLS`` (which a provider's config is checked against without
importing any adapter; a test checks that the two lists agree). The factory
(``providers.factory``), the render check's system-placement rule (``certify.checks``) and
the simulator (``providers.simulator.app``) all ask this registry.
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


def plugin_for(protocol: str) -> ProtocolPlugin:
    """Return the plug-in of ``protocol``; raise ``ValueError`` for an unknown one."""
    try:
        return PLUGINS[protocol]
    except KeyError:
        raise ValueError(f"unknown provider protocol {protocol!r}") from None
