"""What the Messages API refuses, as ``RequestRefused`` with its status and envelope.

Sources: the API reference (https://docs.anthropic.com/en/api/messages), the errors page
(https://docs.anthropic.com/en/api/errors) and the tool-use guide
(https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use); messages
follow the API's validation wording. docs/simulator.md lists every rule with its source.
"""

from __future__ import annotations

import re
from typing import Any

from providers.base import RequestRefused
from providers.endpoint import Capabilities

#: Models that refuse ``temperature`` with a 400 ("`temperature` is deprecated for this
#: model.", top_p and top_k too), thinking or not: Claude Opus 4.7 and later, every model of
#: the 5 generation on (Sonnet 5, Haiku 5.5, ...), and the Fable and Mythos lines, Mythos
#: Preview included. Opus 4.6, Sonnet 4.6, Haiku 4.5 and older take it. Evidence in
#: docs/decisions.md ("`temperature` is omitted where the model refuses it").
NO_TEMPERATURE = re.compile(
    r"^claude-(?:opus-4-(?:[7-9]|\d\d)|fable\b|mythos\b|[a-z]+-(?:[5-9]|\d\d)(?!\d))"
)
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
KNOWN_FIELDS = frozenset(
    {
        "model", "messages", "max_tokens", "system", "metadata", "stop_sequences", "stream",
        "temperature", "top_p", "top_k", "tools", "tool_choice", "thinking", "service_tier",
        "container", "mcp_servers", "output_config", "context_management", "inference_geo",
        "cache_control", "speed",
    }
)  # fmt: skip


def capabilities(model: str) -> Capabilities:
    """Return what ``model`` accepts: recent Claude models refuse ``temperature``."""
    return Capabilities(temperature=not NO_TEMPERATURE.match(model))


def _refuse(message: str) -> RequestRefused:
    return RequestRefused(message, status=400, type="invalid_request_error")


def _in_range(body: dict[str, Any], field: str, low: float, high: float) -> None:
    value = body.get(field)
    if value is None:
        return
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise _refuse(f"{field}: Input should be a valid number")
    if value > high:
        raise _refuse(f"{field}: Input should be less than or equal to {high:g}")
    if value < low:
        raise _refuse(f"{field}: Input should be greater than or equal to {low:g}")


def check_request(body: dict[str, Any]) -> None:
    """Raise ``RequestRefused`` for a body ``POST /v1/messages`` refuses."""
    for field in body:
        if field not in KNOWN_FIELDS:
            raise _refuse(f"{field}: Extra inputs are not permitted")
    for field in ("model", "messages", "max_tokens"):
        if field not in body:
            raise _refuse(f"{field}: Field required")
    model, max_tokens = body["model"], body["max_tokens"]
    if not isinstance(model, str) or not model:
        raise _refuse("model: Input should be a valid string")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        raise _refuse("max_tokens: Input should be a valid integer")
    if max_tokens < 1:
        raise _refuse("max_tokens: Input should be greater than or equal to 1")
    _check_messages(body["messages"])
    if "temperature" in body and NO_TEMPERATURE.match(model):
        raise _refuse("`temperature` is deprecated for this model.")
    _in_range(body, "temperature", 0, 1)
    _in_range(body, "top_p", 0, 1)
    _check_tools(body.get("tools"), body.get("tool_choice"))


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list):
        raise _refuse("messages: Input should be a valid list")
    if not messages:
        raise _refuse("messages: at least one message is required")
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "system":
            raise _refuse(
                'messages: Unexpected role "system". The Messages API accepts a top-level '
                '`system` parameter, not "system" as an input message role.'
            )
        if role not in ("user", "assistant"):
            raise _refuse(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        if "content" not in message:
            raise _refuse(f"messages.{i}.content: Field required")


def _check_tools(tools: Any, choice: Any) -> None:
    names = []
    for i, tool in enumerate(tools or []):
        if not isinstance(tool, dict):
            raise _refuse(f"tools.{i}: Input should be a valid dictionary")
        name = tool.get("name")
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            raise _refuse(
                f"tools.{i}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
            )
        if "input_schema" not in tool:
            raise _refuse(f"tools.{i}.custom.input_schema: Field required")
        schema = tool["input_schema"]
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise _refuse(f"tools.{i}.custom.input_schema.type: Input should be 'object'")
        names.append(name)
    if choice is None:
        return
    if not tools:
        raise _refuse("tool_choice may only be specified while providing tools.")
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind not in ("auto", "any", "tool", "none"):
        raise _refuse("tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'")
    if kind == "tool" and choice.get("name") not in names:
        raise _refuse(f"tool_choice.name: Tool '{choice.get('name')}' not found in tools")
