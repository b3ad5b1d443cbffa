"""The official SDKs (openai, anthropic, google-genai) against the simulator over real sockets.

Every catalog case is sent the way a user's own code would send it: create, the SDKs' parse
helpers (the pydantic output model of the contract), streaming; and scripted errors must
come out as each SDK's own exception class, with the message and the request id.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
import pytest_asyncio
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types
from google.genai.client import AsyncClient

from contracts.loader import load_catalog as contract_catalog
from contracts.model import Case, Contract
from providers.gemini import to_gemini_schema
from providers.openai import to_strict_schema
from providers.simulator import RunningSimulator, run_simulator
from providers.simulator.control_client import SimulatorControl

CATALOG: dict[str, Contract] = contract_catalog()
CASES = [
    pytest.param(contract, case, id=f"{name}:{case.id}")
    for name, contract in sorted(CATALOG.items())
    for case in contract.cases
]
KEY = "sk-sim-test-key"

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sim() -> AsyncIterator[RunningSimulator]:
    async with run_simulator(catalog=CATALOG) as running:
        yield running


@pytest_asyncio.fixture(loop_scope="module")
async def fresh(sim: RunningSimulator) -> AsyncIterator[RunningSimulator]:
    sim.app.reset()
    yield sim


def openai_client(sim: RunningSimulator, provider: str = "sdk-openai") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key=KEY, base_url=sim.provider_url(provider, "openai"), max_retries=0
    )


def anthropic_client(
    sim: RunningSimulator, provider: str = "sdk-claude"
) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        api_key=KEY, base_url=sim.provider_url(provider, "anthropic"), max_retries=0
    )


def gemini_client(sim: RunningSimulator, provider: str = "sdk-gemini") -> AsyncClient:
    options = genai_types.HttpOptions(base_url=sim.provider_url(provider, "gemini"))
    return genai.Client(api_key="AIza-sim-test-key", http_options=options).aio


def prompt(contract: Contract, case: Case) -> tuple[str, str]:
    rendered = contract.render(case.input)
    return rendered.system, rendered.user


def expected(contract: Contract, case: Case) -> Any:
    return contract.simulate(case.input)


# -- OpenAI -------------------------------------------------------------------------------


@pytest.mark.parametrize(("contract", "case"), CASES)
async def test_openai_sdk_create_with_the_strict_schema_gets_the_contract_answer(
    fresh: RunningSimulator, contract: Contract, case: Case
) -> None:
    system, user = prompt(contract, case)
    async with openai_client(fresh) as client:
        completion = await client.chat.completions.create(
            model="gpt-4o-2024-08-06",
            messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
            temperature=0,
            max_completion_tokens=contract.max_output_tokens,
            response_format={
                "type": "json_schema",
                "json_schema": {
                    "name": contract.schema_name,
                    "schema": to_strict_schema(contract.output_schema),
                    "strict": True,
                },
            },
        )
    content = completion.choices[0].message.content
    assert content is not None and json.loads(content) == expected(contract, case)
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.completion_tokens > 0


@pytest.mark.parametrize(("contract", "case"), CASES)
async def test_openai_sdk_parse_helper_sends_an_accepted_schema_and_parses_the_model(
    fresh: RunningSimulator, contract: Contract, case: Case
) -> None:
    system, user = prompt(contract, case)
    model = contract._output_model
    assert model is not None
    async with openai_client(fresh) as client:
        completion = await client.chat.completions.parse(
            model="gpt-4o-2024-08-06",
            messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
            response_format=model,
        )
    parsed = completion.choices[0].message.parsed
    assert parsed is not None
    assert parsed.model_dump(mode="json") == expected(contract, case)


@pytest.mark.parametrize(("contract", "case"), CASES)
async def test_openai_sdk_stream_yields_deltas_usage_and_ends(
    fresh: RunningSimulator, contract: Contract, case: Case
) -> None:
    system, user = prompt(contract, case)
    async with openai_client(fresh) as client:
        stream = await client.chat.completions.create(
            model="gpt-4o-2024-08-06",
            messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert json.loads(text) == expected(contract, case)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert len(chunks) > 3  # really streamed, not one chunk


async def test_openai_sdk_stream_helper_accumulates_the_parsed_answer(
    fresh: RunningSimulator,
) -> None:
    contract = CATALOG["ticket-triage@1"]
    case = contract.cases[0]
    system, user = prompt(contract, case)
    assert contract._output_model is not None
    async with openai_client(fresh) as client:
        async with client.chat.completions.stream(
            model="gpt-4o-2024-08-06",
            messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
            response_format=contract._output_model,
        ) as stream:
            async for _ in stream:
                pass
            final = await stream.get_final_completion()
    parsed = final.choices[0].message.parsed
    assert parsed is not None and parsed.model_dump(mode="json") == expected(contract, case)


# -- Anthropic ----------------------------------------------------------------------------


def _tool(contract: Contract) -> dict[str, Any]:
    return {
        "name": contract.schema_name,
        "description": "Record the answer in exactly this structure.",
        "input_schema": contract.output_schema,
    }


@pytest.mark.parametrize(("contract", "case"), CASES)
async def test_anthropic_sdk_create_with_a_forced_tool_gets_the_contract_answer(
    fresh: RunningSimulator, contract: Contract, case: Case
) -> None:
    system, user = prompt(contract, case)
    async with anthropic_client(fresh) as client:
        message = await client.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=contract.max_output_tokens,
            system=system,
            messages=[{"role": "user", "content": user}],
            tools=[_tool(contract)],  # type: ignore[list-item]
            tool_choice={"type": "tool", "name": contract.schema_name},
        )
    [block] = message.content
    assert block.type == "tool_use" and block.input == expected(contract, case)
    assert message.stop_reason == "tool_use" and message.usage.output_tokens > 0


@pytest.mark.parametrize("model", ["claude-opus-4-8", "claude-sonnet-5-5", "claude-haiku-4-5"])
async def test_anthropic_sdk_without_temperature_is_served_for_every_kind_of_model(
    fresh: RunningSimulator, model: str
) -> None:
    """The SDK (2.x) sends no temperature: models that refuse one and models that take one."""
    contract = CATALOG["ticket-triage@1"]
    case = contract.cases[0]
    system, user = prompt(contract, case)
    async with anthropic_client(fresh) as client:
        message = await client.messages.create(
            model=model,
            max_tokens=contract.max_output_tokens,
            system=system,
            messages=[{"role": "user", "content": user}],
            tools=[_tool(contract)],  # type: ignore[list-item]
            tool_choice={"type": "tool", "name": contract.schema_name},
        )
    [block] = message.content
    assert block.type == "tool_use" and block.input == expected(contract, case)


@pytest.mark.parametrize(("contract", "case"), CASES)
async def test_anthropic_sdk_parse_helper_parses_the_model(
    fresh: RunningSimulator, contract: Contract, case: Case
) -> None:
    system, user = prompt(contract, case)
    assert contract._output_model is not None
    async with anthropic_client(fresh) as client:
        message = await client.messages.parse(
            model="claude-sonnet-4-6",
            max_tokens=contract.max_output_tokens,
            system=system,
            messages=[{"role": "user", "content": user}],
            output_format=contract._output_model,
        )
    parsed = message.parsed_output
    assert parsed is not None and parsed.model_dump(mode="json") == expected(contract, case)


@pytest.mark.parametrize(("contract", "case"), CASES)
async def test_anthropic_sdk_stream_assembles_the_tool_input_from_json_deltas(
    fresh: RunningSimulator, contract: Contract, case: Case
) -> None:
    system, user = prompt(contract, case)
    async with anthropic_client(fresh) as client:
        async with client.messages.stream(
            model="claude-sonnet-4-6",
            max_tokens=contract.max_output_tokens,
            system=system,
            messages=[{"role": "user", "content": user}],
            tools=[_tool(contract)],  # type: ignore[list-item]
            tool_choice={"type": "tool", "name": contract.schema_name},
        ) as stream:
            kinds = [event.type async for event in stream]
            message = await stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds.count("input_json") > 1
    [block] = message.content
    assert block.type == "tool_use" and block.input == expected(contract, case)
    assert message.stop_reason == "tool_use"


async def test_anthropic_sdk_stream_of_text_ends_with_end_turn(fresh: RunningSimulator) -> None:
    contract = CATALOG["reply-draft@1"]
    case = contract.cases[0]
    system, user = prompt(contract, case)
    async with anthropic_client(fresh) as client:
        async with client.messages.stream(
            model="claude-sonnet-4-6",
            max_tokens=contract.max_output_tokens,
            system=system,
            messages=[{"role": "user", "content": user}],
        ) as stream:
            text = "".join([t async for t in stream.text_stream])
            message = await stream.get_final_message()
    assert json.loads(text) == expected(contract, case)
    assert message.stop_reason == "end_turn"


# -- Gemini -------------------------------------------------------------------------------


def _gemini_config(
    contract: Contract, system: str, **extra: Any
) -> genai_types.GenerateContentConfig:
    return genai_types.GenerateContentConfig(
        system_instruction=system,
        temperature=0,
        max_output_tokens=contract.max_output_tokens,
        response_mime_type="application/json",
        **extra,
    )


@pytest.mark.parametrize(("contract", "case"), CASES)
async def test_gemini_sdk_generate_with_the_response_schema_gets_the_contract_answer(
    fresh: RunningSimulator, contract: Contract, case: Case
) -> None:
    system, user = prompt(contract, case)
    async with gemini_client(fresh) as client:
        response = await client.models.generate_content(
            model="gemini-2.5-flash",
            contents=user,
            config=_gemini_config(
                contract, system, response_schema=to_gemini_schema(contract.output_schema)
            ),
        )
    assert response.text is not None and json.loads(response.text) == expected(contract, case)
    assert response.candidates and response.candidates[0].finish_reason == "STOP"
    assert response.usage_metadata and response.usage_metadata.candidates_token_count


@pytest.mark.parametrize(("contract", "case"), CASES)
async def test_gemini_sdk_generate_with_the_contracts_json_schema_gets_the_contract_answer(
    fresh: RunningSimulator, contract: Contract, case: Case
) -> None:
    """google-genai's JSON Schema path sends the schema as it is (``responseJsonSchema``)."""
    system, user = prompt(contract, case)
    async with gemini_client(fresh) as client:
        response = await client.models.generate_content(
            model="gemini-2.5-flash",
            contents=user,
            config=_gemini_config(contract, system, response_json_schema=contract.output_schema),
        )
    assert response.text is not None and json.loads(response.text) == expected(contract, case)


@pytest.mark.parametrize(("contract", "case"), CASES)
async def test_gemini_sdk_parses_the_pydantic_model_it_was_given(
    fresh: RunningSimulator, contract: Contract, case: Case
) -> None:
    system, user = prompt(contract, case)
    async with gemini_client(fresh) as client:
        response = await client.models.generate_content(
            model="gemini-2.5-flash",
            contents=user,
            config=_gemini_config(contract, system, response_schema=contract._output_model),
        )
    parsed = response.parsed
    assert parsed is not None
    assert parsed.model_dump(mode="json") == expected(contract, case)  # type: ignore[union-attr]


@pytest.mark.parametrize(("contract", "case"), CASES)
async def test_gemini_sdk_stream_over_sse_yields_chunks_that_join_to_the_answer(
    fresh: RunningSimulator, contract: Contract, case: Case
) -> None:
    system, user = prompt(contract, case)
    async with gemini_client(fresh) as client:
        chunks = [
            chunk
            async for chunk in await client.models.generate_content_stream(
                model="gemini-2.5-flash",
                contents=user,
                config=_gemini_config(
                    contract, system, response_schema=to_gemini_schema(contract.output_schema)
                ),
            )
        ]
    assert len(chunks) > 1
    assert json.loads("".join(c.text or "" for c in chunks)) == expected(contract, case)
    last = chunks[-1].candidates
    assert last and last[0].finish_reason == "STOP"
    [call] = fresh.calls("sdk-gemini")
    assert call["path"].endswith(":streamGenerateContent")


# -- errors -------------------------------------------------------------------------------

OPENAI_ERRORS = [
    (400, openai.BadRequestError),
    (401, openai.AuthenticationError),
    (404, openai.NotFoundError),
    (429, openai.RateLimitError),
    (500, openai.InternalServerError),
    (503, openai.InternalServerError),
    (529, openai.InternalServerError),
]
ANTHROPIC_ERRORS = [
    (400, anthropic.BadRequestError),
    (401, anthropic.AuthenticationError),
    (404, anthropic.NotFoundError),
    (429, anthropic.RateLimitError),
    (500, anthropic.InternalServerError),
    (503, anthropic.ServiceUnavailableError),
    (529, anthropic.OverloadedError),
]
GEMINI_ERRORS = [
    (400, genai_errors.ClientError, "INVALID_ARGUMENT"),
    (401, genai_errors.ClientError, "UNAUTHENTICATED"),
    (404, genai_errors.ClientError, "NOT_FOUND"),
    (429, genai_errors.ClientError, "RESOURCE_EXHAUSTED"),
    (500, genai_errors.ServerError, "INTERNAL"),
    (503, genai_errors.ServerError, "UNAVAILABLE"),
    (529, genai_errors.ServerError, "UNKNOWN"),
]


async def _script(sim: RunningSimulator, provider: str, code: int) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{sim.base_url}/_sim/script",
            json={
                "provider": provider,
                "behaviours": [{"kind": "status", "code": code, "retry_after": 7}],
            },
        )
        assert response.status_code == 200


def _triage() -> tuple[str, str]:
    contract = CATALOG["ticket-triage@1"]
    return prompt(contract, contract.cases[0])


@pytest.mark.parametrize(("code", "error"), OPENAI_ERRORS)
async def test_openai_sdk_raises_its_own_class_with_message_and_request_id(
    fresh: RunningSimulator, code: int, error: type[openai.APIStatusError]
) -> None:
    await _script(fresh, "sdk-openai", code)
    system, user = _triage()
    async with openai_client(fresh) as client:
        with pytest.raises(error) as caught:
            await client.chat.completions.create(
                model="gpt-4o",
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
            )
    exc = caught.value
    assert exc.status_code == code
    assert exc.request_id and exc.request_id.startswith("req_")
    assert isinstance(exc.body, dict) and exc.body["message"] in str(exc)
    assert exc.type == (
        "requests" if code == 429 else "server_error" if code >= 500 else "invalid_request_error"
    )
    assert exc.response.headers["retry-after"] == "7"


@pytest.mark.parametrize(("code", "error"), ANTHROPIC_ERRORS)
async def test_anthropic_sdk_raises_its_own_class_with_message_and_request_id(
    fresh: RunningSimulator, code: int, error: type[anthropic.APIStatusError]
) -> None:
    await _script(fresh, "sdk-claude", code)
    system, user = _triage()
    async with anthropic_client(fresh) as client:
        with pytest.raises(error) as caught:
            await client.messages.create(
                model="claude-sonnet-4-6",
                max_tokens=100,
                system=system,
                messages=[{"role": "user", "content": user}],
            )
    exc = caught.value
    assert type(exc) is error and exc.status_code == code
    assert exc.request_id and exc.request_id.startswith("req_")
    assert isinstance(exc.body, dict) and exc.body["type"] == "error"
    assert exc.body["error"]["message"] in str(exc)
    assert exc.response.headers["retry-after"] == "7"


@pytest.mark.parametrize(("code", "error", "status"), GEMINI_ERRORS)
async def test_gemini_sdk_raises_its_own_class_with_code_status_and_message(
    fresh: RunningSimulator, code: int, error: type[genai_errors.APIError], status: str
) -> None:
    await _script(fresh, "sdk-gemini", code)
    _, user = _triage()
    async with gemini_client(fresh) as client:
        with pytest.raises(error) as caught:
            await client.models.generate_content(model="gemini-2.5-flash", contents=user)
    exc = caught.value
    assert exc.code == code and exc.status == status
    assert exc.message and exc.message in str(exc)


# -- rate limits: the SDKs' own retries read the simulator's headers ---------------------


async def _limit(sim: RunningSimulator, provider: str, requests_per_second: float) -> None:
    async with httpx.AsyncClient() as client:
        await SimulatorControl(client, sim.base_url).limit(provider, requests_per_second, burst=1)


def _gap_after_the_429(sim: RunningSimulator, provider: str) -> float:
    calls = sim.calls(provider)
    assert [(c["behaviour"], c["status"]) for c in calls] == [
        ("ok", 200),
        ("rate_limited", 429),
        ("ok", 200),
    ]
    return float(calls[2]["received_at"] - calls[1]["received_at"])


async def test_openai_sdk_waits_out_a_429_by_its_retry_after_ms_and_succeeds(
    fresh: RunningSimulator,
) -> None:
    """At 0.8 requests per second the 429 says ``retry-after-ms: 1250`` and
    ``retry-after: 2``; the SDK's own backoff would be 0.375 to 0.5 s. A retry 1.25 s
    later is the SDK reading ``retry-after-ms``: the headers are the ones it knows."""
    await _limit(fresh, "sdk-openai", 0.8)
    system, user = _triage()
    messages: Any = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    client = openai.AsyncOpenAI(
        api_key=KEY, base_url=fresh.provider_url("sdk-openai", "openai"), max_retries=2
    )
    async with client:
        await client.chat.completions.create(model="gpt-4o", messages=messages)
        raw = await client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=messages
        )
    assert raw.retries_taken == 1
    assert raw.parse().choices[0].message.content
    assert raw.headers["x-ratelimit-limit-requests"] == "48"
    assert 1.2 <= _gap_after_the_429(fresh, "sdk-openai") < 1.9


async def test_anthropic_sdk_waits_out_a_429_by_its_retry_after_and_succeeds(
    fresh: RunningSimulator,
) -> None:
    """At 1 request per second the 429 says ``retry-after: 1`` (whole seconds, as the API
    does); the SDK's own backoff would be at most 0.5 s."""
    await _limit(fresh, "sdk-claude", 1)
    system, user = _triage()
    client = anthropic.AsyncAnthropic(
        api_key=KEY, base_url=fresh.provider_url("sdk-claude", "anthropic"), max_retries=2
    )
    async with client:
        for _ in range(2):
            raw = await client.messages.with_raw_response.create(
                model="claude-sonnet-4-6",
                max_tokens=100,
                system=system,
                messages=[{"role": "user", "content": user}],
            )
    assert raw.retries_taken == 1
    assert (await raw.parse()).stop_reason == "end_turn"
    assert raw.headers["anthropic-ratelimit-requests-limit"] == "60"
    assert _gap_after_the_429(fresh, "sdk-claude") >= 0.95


async def test_openai_sdk_without_v1_in_base_url_gets_openais_invalid_url_404(
    fresh: RunningSimulator,
) -> None:
    _, user = _triage()
    client = openai.AsyncOpenAI(
        api_key=KEY, base_url=f"{fresh.base_url}/p/sdk-openai", max_retries=0
    )
    async with client:
        with pytest.raises(openai.NotFoundError) as caught:
            await client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": user}]
            )
    assert caught.value.body == {
        "message": "Invalid URL (POST /p/sdk-openai/chat/completions)",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
    assert caught.value.request_id


async def test_anthropic_sdk_with_v1_in_base_url_gets_anthropics_not_found_envelope(
    fresh: RunningSimulator,
) -> None:
    _, user = _triage()
    client = anthropic.AsyncAnthropic(
        api_key=KEY, base_url=f"{fresh.base_url}/p/sdk-claude/v1", max_retries=0
    )
    async with client:
        with pytest.raises(anthropic.NotFoundError) as caught:
            await client.messages.create(
                model="claude-sonnet-4-6",
                max_tokens=10,
                messages=[{"role": "user", "content": user}],
            )
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "Not Found"},
        "request_id": caught.value.request_id,
    }


async def test_openai_sdk_is_refused_an_enum_without_type_under_strict(
    fresh: RunningSimulator,
) -> None:
    contract = CATALOG["ticket-triage@1"]
    system, user = _triage()
    async with openai_client(fresh) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="gpt-4o",
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                response_format={
                    "type": "json_schema",
                    "json_schema": {
                        "name": contract.schema_name,
                        "schema": contract.output_schema,  # untranslated: enums without type
                        "strict": True,
                    },
                },
            )
    assert caught.value.code == "invalid_json_schema"
    assert caught.value.param == "response_format"
    assert "In context=('properties', 'category'), schema must have a 'type' key." in str(
        caught.value
    )
