"""Load contract folders (``contracts/catalog/<name>/``) and check every file with clear errors.

A contract folder holds::

    contract.toml        name, version, description, hedgeable, temperature,
                         max_output_tokens, schema_name, must_agree; optional tables
                         [variants] per_run and [budget] (``contracts.budget``)
    system.j2, user.j2   the prompt (Jinja2, strict undefined; rendered with the input's keys)
    input.schema.json    JSON Schema of the input
    output.schema.json   JSON Schema of the output (an object, additionalProperties false)
    assertions.toml      [[assertion]] tables, see ``contracts.assertions``
    cases.jsonl          one case a line: {"id", "input", "expect", "note", "tags"}
    hooks.py             optional: ``class Output(pydantic.BaseModel)`` and
                         ``def check(input, output, expect) -> list[str]``
    simulate.py          ``def answer(input) -> dict`` and ``def sloppy(input) -> dict``;
                         optional ``def wrong_language(input) -> dict`` (free text in the
                         wrong language, for the simulator's ``wrong-language`` profile)
                         and ``def misread(input) -> dict`` (a must-agree field wrong, for
                         the ``catalog-only`` profile off the catalog's own inputs)
    variations.py        optional: ``RELATIONS``, how the cases may vary
                         (``contracts.relations``)

The fingerprint is sha256 over every file, normalized (JSON and TOML as RFC 8785 canonical
JSON, text with LF line endings), so changing any of them invalidates its certificates.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import sys
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import jinja2
import jsonschema
import pydantic
import rfc8785

from contracts.assertions import Assertion, AssertionSpecError
from contracts.budget import Budget, BudgetSpecError
from contracts.model import Case, Contract, ContractError
from contracts.relations import Relation

CATALOG_ROOT = Path(__file__).parent / "catalog"
REQUIRED_FILES = (
    "contract.toml",
    "system.j2",
    "user.j2",
    "input.schema.json",
    "output.schema.json",
    "assertions.toml",
    "cases.jsonl",
    "simulate.py",
)
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{1,62}$")
SCHEMA_NAME_RE = re.compile(r"^[a-zA-Z0-9_]{1,64}$")
CASE_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,79}$")
_META_KEYS = {
    "name",
    "version",
    "description",
    "hedgeable",
    "temperature",
    "max_output_tokens",
    "schema_name",
    "must_agree",
    "variants",
    "budget",
}
DEFAULT_VARIANTS_PER_RUN = 8  # when variations.py exists and [variants] says nothing
MAX_VARIANTS_PER_RUN = 500


class Catalog(Mapping[str, Contract]):
    """The loaded contracts, keyed by ``name@version``."""

    def __init__(self, contracts: Mapping[str, Contract], root: Path) -> None:
        self._contracts = dict(contracts)
        self.root = root

    def __getitem__(self, key: str) -> Contract:
        return self._contracts[key]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._contracts))

    def __len__(self) -> int:
        return len(self._contracts)

    def __repr__(self) -> str:
        return f"Catalog({sorted(self._contracts)!r}, root={str(self.root)!r})"


def load_catalog(root: Path | None = None) -> Catalog:
    """Load every contract folder under ``root`` (default: the shipped catalog)."""
    root = Path(root) if root is not None else CATALOG_ROOT
    if not root.is_dir():
        raise ContractError(str(root), "catalog folder does not exist")
    contracts: dict[str, Contract] = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not _ignored(p)):
        contract = load_contract(folder)
        if contract.name in contracts:
            raise ContractError(str(folder), f"duplicate contract name {contract.name}")
        contracts[contract.name] = contract
    return Catalog(contracts, root)


def contract_fingerprint(folder: Path) -> str:
    """Return sha256 hex over the normalized files of a contract folder."""
    digest = hashlib.sha256()
    for path in sorted(_files(folder)):
        rel = path.relative_to(folder).as_posix()
        digest.update(rel.encode() + b"\0" + hashlib.sha256(_normalized(path)).digest())
    return digest.hexdigest()


def load_contract(folder: Path) -> Contract:
    """Load and check one contract folder."""
    folder = Path(folder)
    for name in REQUIRED_FILES:
        if not (folder / name).is_file():
            raise ContractError(str(folder / name), "required file is missing")
    meta = _load_meta(folder / "contract.toml")
    name = f"{meta['name']}@{meta['version']}"
    input_schema = _load_schema(folder / "input.schema.json")
    output_schema = _load_schema(folder / "output.schema.json")
    _check_output_schema(folder / "output.schema.json", output_schema)
    props = set(output_schema["properties"])
    for field in meta["must_agree"]:
        if field not in props:
            raise ContractError(
                str(folder / "contract.toml"), f"must_agree names unknown output field {field!r}"
            )
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False
    )
    templates = {}
    for tname in ("system.j2", "user.j2"):
        try:
            templates[tname] = env.from_string((folder / tname).read_text(encoding="utf-8"))
        except jinja2.TemplateSyntaxError as exc:
            raise ContractError(str(folder / tname), f"line {exc.lineno}: {exc.message}") from exc
    assertions = _load_assertions(folder / "assertions.toml")
    hooks = _import(folder / "hooks.py") if (folder / "hooks.py").is_file() else None
    output_model = getattr(hooks, "Output", None) if hooks else None
    if output_model is not None and not (
        isinstance(output_model, type) and issubclass(output_model, pydantic.BaseModel)
    ):
        raise ContractError(str(folder / "hooks.py"), "Output must be a pydantic BaseModel")
    hook = getattr(hooks, "check", None) if hooks else None
    sim = _import(folder / "simulate.py")
    for fn in ("answer", "sloppy"):
        if not callable(getattr(sim, fn, None)):
            raise ContractError(str(folder / "simulate.py"), f"missing function {fn}(input)")
    relations = _load_relations(folder / "variations.py")
    per_run = _variants_per_run(folder / "contract.toml", meta, relations)
    try:
        budget = Budget.from_table(meta.get("budget", {}))
    except BudgetSpecError as exc:
        raise ContractError(str(folder / "contract.toml"), f"[budget]: {exc}") from exc
    contract = Contract(
        name=name,
        description=meta["description"],
        hedgeable=meta["hedgeable"],
        temperature=float(meta["temperature"]),
        max_output_tokens=meta["max_output_tokens"],
        input_schema=input_schema,
        output_schema=output_schema,
        schema_name=meta["schema_name"],
        must_agree=tuple(meta["must_agree"]),
        fingerprint=contract_fingerprint(folder),
        cases=(),
        assertions=assertions,
        root=str(folder),
        relations=relations,
        variants_per_run=per_run,
        budget=budget,
        _system_template=templates["system.j2"],
        _user_template=templates["user.j2"],
        _output_model=output_model,
        _hook=hook,
        _answer=sim.answer,
        _sloppy=sim.sloppy,
        _wrong_language=_optional_function(folder / "simulate.py", sim, "wrong_language"),
        _misread=_optional_function(folder / "simulate.py", sim, "misread"),
    )
    cases = _load_cases(folder / "cases.jsonl", contract)
    object.__setattr__(contract, "cases", cases)
    return contract


def _ignored(path: Path) -> bool:
    return path.name.startswith((".", "_")) or path.name == "__pycache__"


def _files(folder: Path) -> Iterator[Path]:
    for path in folder.rglob("*"):
        rel = path.relative_to(folder)
        if any(_ignored(Path(part)) for part in rel.parts) or path.suffix == ".pyc":
            continue
        if path.is_file():
            yield path


def _normalized(path: Path) -> bytes:
    raw = path.read_bytes()
    try:
        if path.suffix == ".json":
            return bytes(rfc8785.dumps(json.loads(raw)))
        if path.suffix == ".toml":
            return bytes(rfc8785.dumps(tomllib.loads(raw.decode("utf-8"))))
        if path.suffix == ".jsonl":
            lines = [ln for ln in raw.decode("utf-8").splitlines() if ln.strip()]
            return b"\n".join(bytes(rfc8785.dumps(json.loads(ln))) for ln in lines)
    except (ValueError, tomllib.TOMLDecodeError, rfc8785.CanonicalizationError):
        pass  # the loader reports the parse error with its line; hash the bytes as they are
    return raw.replace(b"\r\n", b"\n")


def _load_meta(path: Path) -> dict[str, Any]:
    try:
        meta = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ContractError(str(path), f"not valid TOML: {exc}") from exc
    unknown = set(meta) - _META_KEYS
    if unknown:
        raise ContractError(str(path), f"unknown key(s) {sorted(unknown)}")
    checks: list[tuple[str, type | tuple[type, ...]]] = [
        ("name", str),
        ("version", int),
        ("description", str),
        ("hedgeable", bool),
        ("temperature", (int, float)),
        ("max_output_tokens", int),
        ("schema_name", str),
        ("must_agree", list),
    ]
    for table in ("variants", "budget"):
        if table in meta and not isinstance(meta[table], dict):
            raise ContractError(str(path), f"{table!r} must be a table ([{table}])")
    for key, kind in checks:
        if key not in meta:
            raise ContractError(str(path), f"missing key {key!r}")
        if not isinstance(meta[key], kind) or (kind is int and isinstance(meta[key], bool)):
            raise ContractError(str(path), f"{key!r} has the wrong type")
    if not NAME_RE.match(meta["name"]):
        raise ContractError(str(path), f"name {meta['name']!r} must match {NAME_RE.pattern}")
    if not SCHEMA_NAME_RE.match(meta["schema_name"]):
        raise ContractError(str(path), f"schema_name must match {SCHEMA_NAME_RE.pattern}")
    if not 0.0 <= float(meta["temperature"]) <= 2.0:
        raise ContractError(str(path), "temperature must be within 0..2")
    if not 1 <= meta["max_output_tokens"] <= 100_000:
        raise ContractError(str(path), "max_output_tokens must be within 1..100000")
    if meta["version"] < 1:
        raise ContractError(str(path), "version must be >= 1")
    if not meta["description"].strip():
        raise ContractError(str(path), "description is empty")
    return meta


def _load_schema(path: Path) -> dict[str, Any]:
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ContractError(str(path), f"not valid JSON: {exc}") from exc
    if not isinstance(schema, dict):
        raise ContractError(str(path), "a schema is a JSON object")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ContractError(str(path), f"not a valid JSON Schema: {exc.message}") from exc
    return schema


def _check_output_schema(path: Path, schema: dict[str, Any]) -> None:
    if schema.get("type") != "object" or not isinstance(schema.get("properties"), dict):
        raise ContractError(str(path), "the output must be an object with 'properties'")
    if schema.get("additionalProperties") is not False:
        raise ContractError(str(path), "the output must set additionalProperties: false")


def _load_assertions(path: Path) -> tuple[Assertion, ...]:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ContractError(str(path), f"not valid TOML: {exc}") from exc
    if set(raw) - {"assertion"}:
        raise ContractError(str(path), "only [[assertion]] tables are allowed")
    out: list[Assertion] = []
    for i, item in enumerate(raw.get("assertion", []), start=1):
        try:
            out.append(Assertion.from_dict(item))
        except AssertionSpecError as exc:
            raise ContractError(str(path), f"assertion #{i}: {exc}") from exc
    ids = [a.id for a in out]
    if len(ids) != len(set(ids)):
        raise ContractError(str(path), "assertion ids must be unique")
    return tuple(out)


def _load_cases(path: Path, contract: Contract) -> tuple[Case, ...]:
    cases: list[Case] = []
    seen: set[str] = set()
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            raw = json.loads(line)
        except ValueError as exc:
            raise ContractError(where, f"not valid JSON: {exc}") from exc
        if not isinstance(raw, dict) or set(raw) - {"id", "input", "expect", "note", "tags"}:
            raise ContractError(where, "a case is {id, input, expect, note, tags}")
        cid = raw.get("id")
        if not isinstance(cid, str) or not CASE_ID_RE.match(cid):
            raise ContractError(where, f"case id {cid!r} must match {CASE_ID_RE.pattern}")
        if cid in seen:
            raise ContractError(where, f"duplicate case id {cid!r}")
        seen.add(cid)
        if not isinstance(raw.get("expect"), dict):
            raise ContractError(where, f"case {cid}: 'expect' must be an object")
        errors = contract.validate_input(raw.get("input"))
        if errors:
            raise ContractError(where, f"case {cid}: input breaks the input schema: {errors[0]}")
        try:
            contract.render(raw["input"])
        except jinja2.UndefinedError as exc:
            raise ContractError(where, f"case {cid}: template: {exc.message}") from exc
        cases.append(
            Case(
                id=cid,
                input=raw["input"],
                expect=raw["expect"],
                note=str(raw.get("note", "")),
                tags=tuple(raw.get("tags", ())),
            )
        )
    if not cases:
        raise ContractError(str(path), "a contract needs at least one case")
    return tuple(cases)


def _load_relations(path: Path) -> tuple[Relation, ...]:
    if not path.is_file():
        return ()
    declared = getattr(_import(path), "RELATIONS", None)
    if not isinstance(declared, tuple | list) or not all(isinstance(r, Relation) for r in declared):
        raise ContractError(str(path), "RELATIONS must be a tuple of contracts.relations.Relation")
    names = [r.name for r in declared]
    if len(names) != len(set(names)):
        raise ContractError(str(path), "relation names must be unique")
    return tuple(declared)


def _variants_per_run(path: Path, meta: dict[str, Any], relations: tuple[Relation, ...]) -> int:
    table = meta.get("variants", {})
    if set(table) - {"per_run"}:
        raise ContractError(str(path), f"[variants] knows only per_run, not {sorted(table)}")
    per_run = table.get("per_run", DEFAULT_VARIANTS_PER_RUN if relations else 0)
    if isinstance(per_run, bool) or not isinstance(per_run, int):
        raise ContractError(str(path), "[variants] per_run must be an integer")
    if not 0 <= per_run <= MAX_VARIANTS_PER_RUN:
        raise ContractError(
            str(path), f"[variants] per_run must be within 0..{MAX_VARIANTS_PER_RUN}"
        )
    if per_run and not relations:
        raise ContractError(str(path), "[variants] per_run > 0 needs variations.py with RELATIONS")
    return per_run


def _optional_function(path: Path, module: ModuleType, name: str) -> Any:
    fn = getattr(module, name, None)
    if fn is not None and not callable(fn):
        raise ContractError(str(path), f"{name} must be a function(input)")
    return fn


def _import(path: Path) -> ModuleType:
    tag = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    modname = f"_onejob_contract_{tag}_{path.stem}"
    spec = importlib.util.spec_from_file_location(modname, path)
    if spec is None or spec.loader is None:
        raise ContractError(str(path), "cannot import")
    module = importlib.util.module_from_spec(spec)
    # Registered so pydantic can resolve the module's postponed annotations.
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(modname, None)
        raise ContractError(str(path), f"import failed: {type(exc).__name__}: {exc}") from exc
    return module
