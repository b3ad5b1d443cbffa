"""What ``generateContent`` refuses, as ``RequestRefused`` with its status and envelope.

Sources: the API reference (https://ai.google.dev/api/generate-content), the ``Schema``
reference (https://ai.google.dev/api/caching#Schema), the structured-output guide
(https://ai.google.dev/gemini-api/docs/structured-output) and the error page
(https://ai.google.dev/gemini-api/docs/troubleshooting). Unknown JSON fields are refused the
way every Google API refuses them (proto3 JSON parsing: "Cannot find field").
"""

from __future__ import annotations

from typing import Any

from providers.base import RequestRefused
from providers.endpoint import Capabilities
from providers.gemini.schema import camel, response_schema_problem

KNOWN_FIELDS = frozenset(
    {
        "model", "contents", "systemInstruction", "system_instruction", "generationConfig",
        "generation_config", "safetySettings", "safety_settings", "tools", "toolConfig",
        "tool_config", "cachedContent", "cached_content", "labels",
    }
)  # fmt: skip
GENERATION_FIELDS = frozenset(
    {
        "stopSequences", "responseMimeType", "responseSchema", "responseJsonSchema",
        "responseModalities", "candidateCount", "maxOutputTokens", "temperature", "topP",
        "topK", "seed", "presencePenalty", "frequencyPenalty", "responseLogprobs",
        "logprobs", "enableEnhancedCivicAnswers", "speechConfig", "thinkingConfig",
        "imageConfig", "mediaResolution", "routingConfig", "audioTimestamp",
        "modelSelectionConfig", "enableAffectiveDialog",
    }
)  # fmt: skip
_PROTO = "type.googleapis.com/google.ai.generativelanguage.v1beta"
JSON_MIME_TYPES = ("application/json", "text/x.enum")


def capabilities(model: str) -> Capabilities:
    """Return what ``model`` accepts (every Gemini model takes ``temperature``)."""
    return Capabilities(temperature=True)


def _refuse(message: str) -> RequestRefused:
    return RequestRefused(message, status=400, type="INVALID_ARGUMENT")


def _unknown(name: str, where: str | None = None) -> RequestRefused:
    at = f" at '{where}'" if where else ""
    return _refuse(f'Invalid JSON payload received. Unknown name "{name}"{at}: Cannot find field.')


def check_request(body: dict[str, Any]) -> None:
    """Raise ``RequestRefused`` for a body ``:generateContent`` refuses."""
    body = {camel(k): v for k, v in body.items()}
    for field in body:
        if field not in KNOWN_FIELDS:
            raise _unknown(field)
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise _refuse("* GenerateContentRequest.contents: contents is not specified")
    for content in contents:
        role = content.get("role", "user") if isinstance(content, dict) else None
        if role not in ("user", "model"):
            raise _refuse("Please use a valid role: user, model.")
        if not (isinstance(content, dict) and content.get("parts")):
            raise _refuse(
                "* GenerateContentRequest.contents.parts: contents.parts must not be empty."
            )
    config = body.get("generationConfig")
    if config is None:
        return
    if not isinstance(config, dict):
        raise _refuse(f"Invalid value at 'generation_config' ({_PROTO}.GenerationConfig)")
    config = {camel(k): v for k, v in config.items()}
    for field in config:
        if field not in GENERATION_FIELDS:
            raise _unknown(field, "generation_config")
    temperature = config.get("temperature")
    if temperature is not None and not 0 <= temperature <= 2:
        raise _refuse(
            "* GenerateContentRequest.generation_config.temperature: temperature must be in "
            "the range [0.0, 2.0]"
        )
    limit = config.get("maxOutputTokens")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise _refuse(
            "* GenerateContentRequest.generation_config.max_output_tokens: "
            "max_output_tokens must be positive."
        )
    has_schema = "responseSchema" in config or "responseJsonSchema" in config
    if has_schema and config.get("responseMimeType") not in JSON_MIME_TYPES:
        raise _refuse(
            "* GenerateContentRequest.generation_config.response_mime_type: When using "
            "response_schema, response_mime_type must be one of ['application/json', "
            "'text/x.enum']."
        )
    if "responseSchema" in config and "responseJsonSchema" in config:
        raise _refuse(
            "* GenerateContentRequest.generation_config: response_schema and "
            "response_json_schema cannot both be set."
        )
    if "responseSchema" in config:
        problem = response_schema_problem(config["responseSchema"])
        if problem is not None:
            raise _refuse(problem)
