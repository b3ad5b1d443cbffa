"""The contract model: what a provider's answer must be for one kind of job (DESIGN §6).

A ``Contract`` is built by ``contracts.loader.load_contract`` from a folder of files and is
immutable. It renders prompts, validates inputs and outputs (schema, then the pydantic
model), evaluates semantic assertions, and answers like a faithful (or sloppy) provider
for the simulator.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import jinja2
import jsonschema
import pydantic

from contracts.assertions import Assertion
from contracts.budget import Budget
from contracts.relations import Relation
from contracts.validation import CompiledSchema
from providers.base import ProviderRequest

#: Matches the input block ``render`` appends to every user message (anchored at the end).
INPUT_BLOCK = re.compile(r'\n\n<input contract="([^"<>]+)">\n(.*)\n</input>\s*\Z', re.DOTALL)

#: The share of a catalog case's words an input must contain to resemble that case.
RESEMBLANCE = 0.6
_WORD = re.compile(r"\w{3,}")

SemanticHook = Callable[[Any, Any, Mapping[str, Any]], list[str]]
Simulation = Callable[[Any], dict[str, Any]]


class ContractError(Exception):
    """A contract folder is invalid: names the file and the reason."""

    def __init__(self, file: str, reason: str) -> None:
        super().__init__(f"{file}: {reason}")
        self.file = file
        self.reason = reason


@dataclasses.dataclass(frozen=True, slots=True)
class RenderedPrompt:
    """The two messages of one contract call."""

    system: str
    user: str


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class Case:
    """One real input with the values a correct answer must have."""

    id: str  #: unique within the contract, ``[a-z0-9-]``
    input: dict[str, Any]
    expect: dict[str, Any]
    note: str = ""  #: why this case is in the catalog
    tags: tuple[str, ...] = ()  #: e.g. ``long``, ``unicode``, ``injection``, ``special-tokens``


def input_block(contract_name: str, input: Any) -> str:
    """Return the block that carries the input at the end of the user message.

    ``<`` is escaped as ``\\u003c`` inside the JSON, so text in the input can neither close
    the block nor spell a special token such as ``<|endoftext|>`` literally.
    """
    body = json.dumps(input, ensure_ascii=False, sort_keys=True, indent=1).replace("<", "\\u003c")
    return f'\n\n<input contract="{contract_name}">\n{body}\n</input>'


def parse_input_block(user: str) -> tuple[str, Any]:
    """Return ``(contract name, input)`` from a user message that ``render`` produced."""
    match = INPUT_BLOCK.search(user)
    if match is None:
        raise ValueError("no <input contract=...> block at the end of the user message")
    return match.group(1), json.loads(match.group(2))


def _error_text(err: jsonschema.ValidationError) -> str:
    where = "/".join(str(p) for p in err.absolute_path) or "(root)"
    return f"{where}: {err.message}"


@dataclasses.dataclass(frozen=True, eq=False)
class Contract:
    """One output contract, loaded and checked."""

    name: str  #: ``ticket-triage@1``
    description: str
    hedgeable: bool  #: free of side effects: a hedge attempt may run it twice
    temperature: float
    max_output_tokens: int
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    schema_name: str  #: ``ticket_triage_v1``
    must_agree: tuple[str, ...]  #: top-level output fields primary and fallback must agree on
    fingerprint: str  #: sha256 hex over the normalized files
    cases: tuple[Case, ...]
    assertions: tuple[Assertion, ...] = ()
    root: str = ""  #: the folder it was loaded from
    #: How the cases may vary (``variations.py``), see ``contracts.relations``.
    relations: tuple[Relation, ...] = ()
    variants_per_run: int = 0  #: variants a certification run draws (``[variants] per_run``)
    budget: Budget = dataclasses.field(default_factory=Budget)  #: ``[budget]``
    _system_template: jinja2.Template | None = dataclasses.field(default=None, repr=False)
    _user_template: jinja2.Template | None = dataclasses.field(default=None, repr=False)
    _output_model: type[pydantic.BaseModel] | None = dataclasses.field(default=None, repr=False)
    _hook: SemanticHook | None = dataclasses.field(default=None, repr=False)
    _answer: Simulation | None = dataclasses.field(default=None, repr=False)
    _sloppy: Simulation | None = dataclasses.field(default=None, repr=False)
    _wrong_language: Simulation | None = dataclasses.field(default=None, repr=False)
    _misread: Simulation | None = dataclasses.field(default=None, repr=False)

    @property
    def checks_language(self) -> bool:
        """Say whether an assertion checks the language of free text (needs the detector)."""
        return any(a.kind == "language" for a in self.assertions)

    @property
    def base_name(self) -> str:
        """Return the name without the version (``ticket-triage``)."""
        return self.name.split("@", 1)[0]

    def case(self, case_id: str) -> Case:
        """Return the case with ``case_id``."""
        for c in self.cases:
            if c.id == case_id:
                return c
        raise KeyError(f"{self.name} has no case {case_id!r}")

    def render(self, input: Any) -> RenderedPrompt:
        """Render the system and user messages; the user message ends with the input block."""
        assert self._system_template is not None and self._user_template is not None
        if not isinstance(input, Mapping):
            raise TypeError("a contract input is a JSON object")
        system = self._system_template.render(**input).strip()
        user = self._user_template.render(**input).strip()
        return RenderedPrompt(system=system, user=user + input_block(self.name, input))

    @functools.cached_property
    def _input_check(self) -> CompiledSchema:
        return CompiledSchema(self.input_schema)

    @functools.cached_property
    def _output_check(self) -> CompiledSchema:
        return CompiledSchema(self.output_schema)

    def validate_input(self, input: Any) -> list[str]:
        """Return the input schema errors as readable strings (empty when valid)."""
        return [_error_text(e) for e in self._input_check.errors(input)]

    def schema_errors(self, output: Any) -> list[str]:
        """Return the output JSON Schema errors (``unexpected top-level key 'X'`` for extras)."""
        messages: list[str] = []
        for err in self._output_check.errors(output):
            if err.validator == "additionalProperties" and isinstance(err.instance, dict):
                extras = sorted(k for k in err.instance if k not in _props_of(err.schema))
                for key in extras:
                    level = "top-level key" if not err.absolute_path else "key"
                    where = "/".join(str(p) for p in err.absolute_path)
                    suffix = f" at {where}" if where else ""
                    messages.append(f"unexpected {level} {key!r}{suffix}")
                continue
            messages.append(_error_text(err))
        return messages

    def model_errors(self, output: Any) -> list[str]:
        """Return the pydantic model errors (cross-field rules the schema cannot say)."""
        if self._output_model is None:
            return []
        try:
            self._output_model.model_validate(output)
        except pydantic.ValidationError as exc:
            return [
                f"{'/'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            ]
        return []

    def validate_output(self, output: Any) -> list[str]:
        """Return schema errors, or when the schema holds, the pydantic model errors."""
        return self.schema_errors(output) or self.model_errors(output)

    def semantic_errors(self, input: Any, output: Any, expect: Mapping[str, Any]) -> list[str]:
        """Return every broken semantic assertion (declared ones, then the Python hook)."""
        errors = [
            msg for a in self.assertions if (msg := a.evaluate(input, output, expect)) is not None
        ]
        if self._hook is not None:
            errors.extend(f"hook: {m}" for m in self._hook(input, output, expect))
        return errors

    def provider_request(
        self,
        input: Any,
        *,
        model: str,
        timeout: float,
        idempotency_key: str | None,
        max_output_tokens: int | None = None,
        prompt: RenderedPrompt | None = None,
    ) -> ProviderRequest:
        """Build the protocol-neutral request for one call of this contract; ``prompt``:
        what ``render(input)`` returned for this ``input``, when it was rendered before."""
        if prompt is None:
            prompt = self.render(input)
        return ProviderRequest(
            system=prompt.system,
            user=prompt.user,
            output_schema=self.output_schema,
            schema_name=self.schema_name,
            model=model,
            temperature=self.temperature,
            max_output_tokens=max_output_tokens or self.max_output_tokens,
            timeout=timeout,
            idempotency_key=idempotency_key,
        )

    def simulate(self, input: Any) -> dict[str, Any]:
        """Answer like a faithful provider (deterministic, rule-based)."""
        assert self._answer is not None
        return self._answer(input)

    def simulate_sloppy(self, input: Any) -> dict[str, Any]:
        """Answer schema-valid but semantically wrong, in a way the assertions catch."""
        assert self._sloppy is not None
        return self._sloppy(input)

    def simulate_wrong_language(self, input: Any) -> dict[str, Any]:
        """Answer with the faithful values but free text in the wrong language.

        Contracts without language rules (no optional ``wrong_language`` in simulate.py)
        answer faithfully: they have no free text whose language could be wrong.
        """
        if self._wrong_language is None:
            return self.simulate(input)
        return self._wrong_language(input)

    def is_catalog_input(self, input: Any) -> bool:
        """Say whether ``input`` is one of the catalog's own cases (public in the repository)."""
        return any(input == case.input for case in self.cases)

    def simulate_memorised(self, input: Any) -> dict[str, Any]:
        """Answer like a provider that learnt the catalog: right on its cases, else wrong.

        Off the catalog it misreads a must-agree field (optional ``misread`` in simulate.py;
        without one, the sloppy answer).
        """
        if self.is_catalog_input(input):
            return self.simulate(input)
        return (self._misread or self.simulate_sloppy)(input)

    @functools.cached_property
    def _case_words(self) -> tuple[frozenset[str], ...]:
        return tuple(w for case in self.cases if (w := words_of(case.input)))

    def resembles_catalog(self, input: Any) -> bool:
        """Say whether ``input`` holds most of one catalog case's words (``RESEMBLANCE``):
        the case itself, or a variant that renames, signs or re-routes it."""
        words = words_of(input)
        return any(len(case & words) >= RESEMBLANCE * len(case) for case in self._case_words)

    def simulate_suite_cache(self, input: Any) -> dict[str, Any]:
        """Answer like a semantic cache warmed with the catalog in front of a weaker model:
        right on whatever resembles a catalog case (its variants too), else wrong on a
        must-agree field, as ``simulate_memorised`` is off the catalog."""
        if self.resembles_catalog(input):
            return self.simulate(input)
        return (self._misread or self.simulate_sloppy)(input)


def words_of(value: Any) -> frozenset[str]:
    """Return the words (three letters or more, case-folded) of every string in ``value``."""
    found: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.update(_WORD.findall(item.casefold()))
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return frozenset(found)


def _props_of(schema: Mapping[str, Any]) -> set[str]:
    return set(schema.get("properties", {}))
