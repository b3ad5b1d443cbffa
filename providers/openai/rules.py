"""What the Chat Completions API refuses, as ``RequestRefused`` with its status and envelope.

Sources: the API reference (https://platform.openai.com/docs/api-reference/chat/create), the
Structured Outputs guide (https://platform.openai.com/docs/guides/structured-outputs) and the
reasoning-model guide (https://platform.openai.com/docs/guides/reasoning); the messages are
the API's own wording. docs/simulator.md lists every rule with its source.
"""

from __future__ import annotations

import re
from typing import Any

from providers.base import RequestRefused
from providers.endpoint import Capabilities
from providers.openai.schema import name_problem, strict_schema_problem

#: Models that take no sampling parameters (reasoning models): temperature only at 1.
REASONING_MODEL = re.compile(r"^(?:ft:)?(?:o\d|gpt-5)")
ROLES = ("system", "assistant", "user", "function", "tool", "developer")
#: Top-level fields of ``POST /v1/chat/completions`` (anything else is refused).
KNOWN_FIELDS = frozenset(
    {
        "model", "messages", "audio", "frequency_penalty", "function_call", "functions",
        "logit_bias", "logprobs", "max_completion_tokens", "max_tokens", "metadata",
        "modalities", "n", "parallel_tool_calls", "prediction", "presence_penalty",
        "prompt_cache_key", "prompt_cache_retention", "reasoning_effort", "response_format",
        "safety_identifier", "seed", "service_tier", "stop", "store", "stream",
        "stream_options", "temperature", "tool_choice", "tools", "top_logprobs", "top_p",
        "user", "verbosity", "web_search_options",
    }
)  # fmt: skip


def capabilities(model: str) -> Capabilities:
    """Return what ``model`` accepts: reasoning models refuse ``temperature``."""
    return Capabilities(temperature=not REASONING_MODEL.match(model))


def _refuse(message: str, param: str | None = None, code: str | None = None) -> RequestRefused:
    return RequestRefused(message, status=400, type="invalid_request_error", code=code, param=param)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _range(body: dict[str, Any], field: str, low: float, high: float) -> None:
    value = body.get(field)
    if value is None:
        return
    if not _number(value):
        raise _refuse(
            f"Invalid type for '{field}': expected a decimal, but got a string instead.",
            field,
            "invalid_type",
        )
    if value > high:
        raise _refuse(
            f"Invalid '{field}': decimal above maximum value. Expected a value <= {high:g}, "
            f"but got {value:g} instead.",
            field,
            "decimal_above_max_value",
        )
    if value < low:
        raise _refuse(
            f"Invalid '{field}': decimal below minimum value. Expected a value >= {low:g}, "
            f"but got {value:g} instead.",
            field,
            "decimal_below_min_value",
        )


#: Strict-mode verdicts kept per schema object, keyed by ``(id(schema), fine_tuned)``;
#: each entry holds its schema, so an id is not reused while it is kept.
StrictVerdicts = dict[tuple[int, bool], tuple[Any, str | None]]
STRICT_VERDICTS_KEPT = 256


def check_request(
    body: dict[str, Any], *, model_rules: bool = True, verdicts: StrictVerdicts | None = None
) -> None:
    """Raise ``RequestRefused`` for a body ``POST /v1/chat/completions`` refuses.

    ``model_rules=False`` skips what only OpenAI's own models refuse (reasoning models and
    sampling parameters), for OpenAI-compatible servers whose model names mean nothing here.
    ``verdicts``: a caller whose response schemas are objects it never changes (an
    adapter's converted schemas, ``JsonHttpAdapter.converted``) keeps each one's
    strict-mode verdict there, so a schema is walked once, not on every call (1.5 % of a
    sync job's CPU). Anyone else leaves it out and every schema is walked.
    """
    for field in body:
        if field not in KNOWN_FIELDS:
            raise _refuse(f"Unrecognized request argument supplied: {field}")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _refuse("you must provide a model parameter")
    if "messages" not in body:
        raise _refuse(
            "Missing required parameter: 'messages'.", "messages", "missing_required_parameter"
        )
    _check_messages(body["messages"])
    reasoning = model_rules and REASONING_MODEL.match(model) is not None
    _range(body, "temperature", 0, 2)
    if reasoning and body.get("temperature") not in (None, 1):
        raise _refuse(
            f"Unsupported value: 'temperature' does not support {body['temperature']:g} with "
            f"this model. Only the default (1) value is supported.",
            "temperature",
            "unsupported_value",
        )
    _range(body, "top_p", 0, 1)
    _range(body, "frequency_penalty", -2, 2)
    _range(body, "presence_penalty", -2, 2)
    if reasoning and "max_tokens" in body:
        raise _refuse(
            "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
            "max_tokens",
            "unsupported_parameter",
        )
    for field in ("max_tokens", "max_completion_tokens", "n"):
        value = body.get(field)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise _refuse(
                f"Invalid type for '{field}': expected an integer.", field, "invalid_type"
            )
        if isinstance(value, int) and value < 1:
            raise _refuse(
                f"Invalid '{field}': integer below minimum value. Expected a value >= 1, "
                f"but got {value} instead.",
                field,
                "integer_below_min_value",
            )
    if body.get("store") is not None and not isinstance(body["store"], bool):
        raise _refuse("Invalid type for 'store': expected a boolean.", "store", "invalid_type")
    _check_metadata(body.get("metadata"))
    if "stream_options" in body and body.get("stream") is not True:
        raise _refuse(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
        )
    _check_response_format(body.get("response_format"), body["messages"], model, verdicts)
    _check_tools(body.get("tools"), model)


#: OpenAI's limits on ``metadata``: pairs, key length, value length (characters).
METADATA_PAIRS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512


def _check_metadata(metadata: Any) -> None:
    """Refuse ``metadata`` as OpenAI does: at most 16 string pairs, keys 64, values 512."""
    if metadata is None:
        return
    if not isinstance(metadata, dict):
        raise _refuse(
            "Invalid type for 'metadata': expected an object.", "metadata", "invalid_type"
        )
    if len(metadata) > METADATA_PAIRS:
        raise _refuse(
            f"Invalid 'metadata': too many properties. Expected an object with at most "
            f"{METADATA_PAIRS} properties, but got an object with {len(metadata)} properties "
            "instead.",
            "metadata",
            "object_above_max_properties",
        )
    for key, value in metadata.items():
        if len(key) > METADATA_KEY_CHARS:
            raise _refuse(
                f"Invalid 'metadata': key too long. Keys are at most {METADATA_KEY_CHARS} "
                "characters.",
                "metadata",
                "string_above_max_length",
            )
        if not isinstance(value, str):
            raise _refuse(
                f"Invalid type for 'metadata.{key}': expected a string.",
                f"metadata.{key}",
                "invalid_type",
            )
        if len(value) > METADATA_VALUE_CHARS:
            raise _refuse(
                f"Invalid 'metadata.{key}': string too long. Expected a string with maximum "
                f"length {METADATA_VALUE_CHARS}.",
                f"metadata.{key}",
                "string_above_max_length",
            )


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list):
        raise _refuse(
            "Invalid type for 'messages': expected an array of objects.", "messages", "invalid_type"
        )
    if not messages:
        raise _refuse(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got "
            "an empty array instead.",
            "messages",
            "empty_array",
        )
    answered_tool_calls = False
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ROLES:
            supported = ", ".join(f"'{r}'" for r in ROLES[:-1]) + f", and '{ROLES[-1]}'"
            raise _refuse(
                f"Invalid value: '{role}'. Supported values are: {supported}.",
                f"messages[{i}].role",
                "invalid_value",
            )
        if role == "tool" and not answered_tool_calls:
            raise _refuse(
                "Invalid parameter: messages with role 'tool' must be a response to a "
                "preceeding message with 'tool_calls'.",
                f"messages.[{i}].role",
            )
        if role == "assistant":
            answered_tool_calls = bool(message.get("tool_calls"))
        if "content" not in message and role in ("system", "developer", "user", "tool"):
            raise _refuse(
                f"Missing required parameter: 'messages[{i}].content'.",
                f"messages[{i}].content",
                "missing_required_parameter",
            )


def _check_response_format(
    rf: Any, messages: list[Any], model: str, verdicts: StrictVerdicts | None
) -> None:
    if rf is None:
        return
    kind = rf.get("type") if isinstance(rf, dict) else None
    if kind not in ("text", "json_object", "json_schema"):
        raise _refuse(
            f"Invalid value: '{kind}'. Supported values are: 'json_object', 'json_schema', "
            f"and 'text'.",
            "response_format.type",
            "invalid_value",
        )
    if kind == "json_object" and "json" not in str(messages).lower():
        raise _refuse(
            "'messages' must contain the word 'json' in some form, to use 'response_format' of "
            "type 'json_object'.",
            "messages",
        )
    if kind != "json_schema":
        return
    spec = rf.get("json_schema")
    if not isinstance(spec, dict) or "name" not in spec:
        raise _refuse(
            "Missing required parameter: 'response_format.json_schema.name'.",
            "response_format.json_schema.name",
            "missing_required_parameter",
        )
    if (bad := name_problem(spec["name"], "response_format.json_schema.name")) is not None:
        raise _refuse(bad[0], "response_format.json_schema.name", bad[1])
    if spec.get("strict") is True:
        problem = _strict_problem(spec.get("schema"), model.startswith("ft:"), verdicts)
        if problem is not None:
            raise _refuse(
                f"Invalid schema for response_format '{spec['name']}': {problem}",
                "response_format",
                "invalid_json_schema",
            )


def _strict_problem(schema: Any, fine_tuned: bool, verdicts: StrictVerdicts | None) -> str | None:
    if verdicts is None:
        return strict_schema_problem(schema, fine_tuned=fine_tuned)
    key = (id(schema), fine_tuned)
    hit = verdicts.get(key)
    if hit is not None and hit[0] is schema:
        return hit[1]
    problem = strict_schema_problem(schema, fine_tuned=fine_tuned)
    if len(verdicts) >= STRICT_VERDICTS_KEPT:
        verdicts.clear()
    verdicts[key] = (schema, problem)
    return problem


def _check_tools(tools: Any, model: str) -> None:
    for i, tool in enumerate(tools or []):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict):
            raise _refuse(
                f"Missing required parameter: 'tools[{i}].function'.",
                f"tools[{i}].function",
                "missing_required_parameter",
            )
        field = f"tools[{i}].function.name"
        if (bad := name_problem(function.get("name"), field)) is not None:
            raise _refuse(bad[0], field, bad[1])
        if function.get("strict") is True:
            problem = strict_schema_problem(
                function.get("parameters"), fine_tuned=model.startswith("ft:")
            )
            if problem is not None:
                raise _refuse(
                    f"Invalid schema for function '{function['name']}': {problem}",
                    f"tools[{i}].function.parameters",
                    "invalid_function_parameters",
                )
