"""Run contract cases against providers: ``live``, ``record`` (live + cassettes), ``replay``.

Providers and cases run concurrently (bounded); the k repeats of one case run in order, so
stability is measured on the same conditions. Results (``certify.results``) become
certificates (``UnitResult.certificate``) for the registry; replay results never certify.

Every run has its own id (``Runner.run_id``), part of every downstream key
(``certify/<run id>/<contract>/<case>/<repeat>``), so a provider or proxy that honours
``Idempotency-Key`` cannot answer this run from an earlier one. Repeats that still come
back with one provider id (a caching proxy) are replays, not k samples: stability fails.

A model that refuses ``temperature`` gets requests without it (the adapter reports that in
``ProviderResult.omitted_parameters``); its certificate then says that the stability of its
answers rests on pass^k alone, since the contract's temperature was never applied.

Every run also draws variants of each contract's cases (``contracts.variants``), seeded by
the run id unless a seed is given, the same ones for every provider, and checks them like
the cases. Cassettes hold the catalog's cases only: in replay mode the variants go to
``variant_client`` (the in-process simulator of ``--sim``), or are skipped without one.

With production draws (``--production N``, ``certify.production``), each fallback of a
draw's primary also answers the draw's production inputs, judged against the primary's
stored results; the primary is never called for them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import httpx

from certify.calls import CALL_LAYERS, CallFacts, aggregate, not_reached, one_call
from certify.cassettes import (
    CASSETTE_ROOT,
    CURRENT_TAPE,
    CassetteLibrary,
    RecordingTransport,
    Tape,
    write_cassette,
)
from certify.checks import (
    CASE_LAYERS,
    Check,
    Layer,
    check_agreement,
    check_render,
    check_replays,
    check_stability,
)
from certify.pacing import Pacer
from certify.production import ProductionCheck, ProductionDraw, ProductionResult, judge_sample
from certify.results import CaseResult, CertificationRun, Mode, Progress, UnitResult
from certify.usage import Price
from contracts import language
from contracts.model import Case, Contract
from contracts.registry import adapter_version_of
from contracts.variants import Variant, draw_variants
from providers.base import ProviderRequest
from providers.config import ProviderConfig
from providers.factory import build_provider
from providers.tokenizers import Tokenizer, tokenizer_for

DEFAULT_REPEATS = 3
DEFAULT_CONCURRENCY = 8  # cases in flight at once, across all providers
#: Why a replay run checks no variant when nothing can answer them live.
NO_LIVE_VARIANTS = (
    "replay mode: cassettes hold the catalog's cases only, and no live provider (the "
    "simulator of --sim) answers the variants"
)


def new_run_id(now: dt.datetime | None = None) -> str:
    """Return a fresh certification run id: ``cert-<UTC time>-<random hex>``."""
    t = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    return f"cert-{t:%Y%m%dT%H%M%SZ}-{secrets.token_hex(6)}"


class Spans(Protocol):
    """What a run is traced with (``gateway.tracing.Tracing`` is one; the command line
    passes it when ``[telemetry]`` is on): a span per case, marked as certification."""

    def run(self, name: str, **attributes: Any) -> AbstractContextManager[None]:
        """Run some work in a span of its own."""
        ...


class Runner:
    """Run catalog cases against providers in one mode."""

    def __init__(
        self,
        mode: Mode,
        *,
        repeats: int = DEFAULT_REPEATS,
        concurrency: int = DEFAULT_CONCURRENCY,
        cassette_root: Path = CASSETTE_ROOT,
        recorded_from: str | Callable[[ProviderConfig], str] = "live provider",
        progress: Callable[[Progress], None] | None = None,
        client: httpx.AsyncClient | None = None,
        adapter_version: Callable[[str], str] = adapter_version_of,
        run_id: str | None = None,
        earlier_ids: Callable[[str, str], Mapping[str, str]] | None = None,
        variants: int | None = None,
        seed: str | None = None,
        variant_client: httpx.AsyncClient | None = None,
        prices: Mapping[str, Price] | None = None,
        production: Sequence[ProductionDraw] = (),
        spans: Spans | None = None,
    ) -> None:
        if repeats < 1:
            raise ValueError("repeats must be >= 1")
        self.mode = Mode(mode)
        self.repeats = repeats
        self.concurrency = max(1, concurrency)
        self.cassette_root = Path(cassette_root)
        self.recorded_from = recorded_from
        self.progress = progress
        self._client = client
        self._adapter_version = adapter_version
        self._tokenizers: dict[str, Tokenizer] = {}
        #: Part of every downstream key and recorded in every certificate.
        self.run_id = run_id or new_run_id()
        #: ``(provider, contract) -> {provider id: run id}`` of earlier certificates.
        self._earlier_ids = earlier_ids
        #: Variants per contract (None: each contract's ``per_run``; 0: none).
        self.variants = variants
        #: What the variants are drawn with: the run id unless a seed is given.
        self.seed = seed or self.run_id
        self._variant_client = variant_client
        self._prices = dict(prices or {})
        #: Production inputs per (contract, primary), sent to the fallbacks (``--production``).
        self.production = tuple(production)
        self._pacers: dict[str, Pacer] = {}  #: per provider, for the production calls
        #: Traces each case (None: not traced).
        self._spans = spans

    def draw(self, contract: Contract) -> tuple[Variant, ...]:
        """Return the variants this run checks for ``contract`` (the same for every provider)."""
        count = contract.variants_per_run if self.variants is None else self.variants
        return draw_variants(contract, self.seed, count)

    def client_for(self, providers: Sequence[ProviderConfig]) -> httpx.AsyncClient:
        """Return the client this mode needs: plain, recording, or served from cassettes."""
        secrets = [k for p in providers if (k := p.api_key())]
        if self.mode is Mode.REPLAY:
            return CassetteLibrary(self.cassette_root, secrets).client()
        limits = httpx.Limits(max_connections=self.concurrency * 2)
        if self.mode is Mode.RECORD:
            transport = RecordingTransport(httpx.AsyncHTTPTransport(limits=limits), secrets)
            return httpx.AsyncClient(transport=transport)
        return httpx.AsyncClient(limits=limits)

    async def run(
        self,
        contracts: Sequence[Contract],
        providers: Sequence[ProviderConfig],
        *,
        pairs: Sequence[tuple[str, str]] = (),
        case_filter: Callable[[Contract, Case], bool] | None = None,
    ) -> CertificationRun:
        """Run every case of every contract on every provider; compare the given pairs."""
        started, t0 = dt.datetime.now(dt.UTC), time.perf_counter()
        if any(c.checks_language for c in contracts):
            # Before any request is in flight: loading holds the GIL for seconds, and an
            # in-process simulator on this loop would time calls out meanwhile.
            language.detector()
        client = self._client or self.client_for(providers)
        drawn = {c.name: self.draw(c) for c in contracts}
        try:
            sem = asyncio.Semaphore(self.concurrency)
            units = await asyncio.gather(
                *(
                    self._run_unit(client, sem, contract, provider, case_filter, drawn)
                    for provider in providers
                    for contract in contracts
                )
            )
        finally:
            if self._client is None:
                await client.aclose()
        by_key = {(u.provider.name, u.contract.name): u for u in units}
        for primary, fallback in pairs:
            for contract in contracts:
                p, f = by_key.get((primary, contract.name)), by_key.get((fallback, contract.name))
                if p is not None and f is not None:
                    f.agreement[primary] = [
                        check_agreement(contract, _valid_output(pc), _valid_output(fc))
                        for pc, fc in zip(p.checked, f.checked, strict=True)
                    ]
        return CertificationRun(
            self.run_id,
            self.mode,
            self.repeats,
            list(units),
            started,
            time.perf_counter() - t0,
            seed=self.seed,
        )

    async def _run_unit(
        self,
        client: httpx.AsyncClient,
        sem: asyncio.Semaphore,
        contract: Contract,
        provider: ProviderConfig,
        case_filter: Callable[[Contract, Case], bool] | None,
        drawn: Mapping[str, Sequence[Variant]],
    ) -> UnitResult:
        started, t0 = dt.datetime.now(dt.UTC), time.perf_counter()
        cases = [c for c in contract.cases if case_filter is None or case_filter(contract, c)]
        variants = list(drawn.get(contract.name, ()))
        skipped = None
        variant_client = client
        if self.mode is Mode.REPLAY and variants:
            if self._variant_client is None:
                variants, skipped = [], NO_LIVE_VARIANTS
            else:
                variant_client = self._variant_client
        draws = [
            d
            for d in self.production
            if d.contract == contract.name and provider.name in d.fallbacks
        ]
        done = 0
        total = len(cases) + len(variants) + sum(len(d.samples) for d in draws)

        async def one(case: Case, via: httpx.AsyncClient) -> CaseResult:
            nonlocal done
            async with sem:
                result = await self.run_case(via, contract, case, provider)
            done += 1
            if self.progress:
                self.progress(Progress(provider.name, contract.name, done, total))
            return result

        async def sample(n: int, draw: ProductionDraw) -> ProductionCheck:
            nonlocal done
            key = f"certify/{self.run_id}/{contract.name}/production/{n + 1}"
            async with sem:
                adapter = build_provider(provider, client)
                tokenizer = self._tokenizer(provider)
                pacer = self._pacers.setdefault(provider.name, Pacer(provider))
                judged = await judge_sample(
                    adapter, provider, contract, draw.samples[n], key, tokenizer, pacer
                )
            done += 1
            if self.progress:
                self.progress(Progress(provider.name, contract.name, done, total))
            return judged

        results = await asyncio.gather(
            *(one(c, client) for c in cases), *(one(v, variant_client) for v in variants)
        )
        production = [
            ProductionResult(
                draw,
                list(await asyncio.gather(*(sample(n, draw) for n in range(len(draw.samples))))),
            )
            for draw in draws
        ]
        unit = UnitResult(
            contract=contract,
            provider=provider,
            mode=self.mode,
            repeats=self.repeats,
            adapter_version=self._adapter_version(provider.protocol),
            cases=list(results[: len(cases)]),
            started_at=started,
            duration=time.perf_counter() - t0,
            run_id=self.run_id,
            variants=list(results[len(cases) :]),
            seed=self.seed,
            variants_skipped=skipped,
            price=self._prices.get(provider.name),
            production=production,
        )
        if self.progress:
            self.progress(Progress(provider.name, contract.name, done, total, unit))
        return unit

    def _tokenizer(self, provider: ProviderConfig) -> Tokenizer:
        if provider.name not in self._tokenizers:
            self._tokenizers[provider.name] = tokenizer_for(provider)
        return self._tokenizers[provider.name]

    async def run_case(
        self, client: httpx.AsyncClient, contract: Contract, case: Case, provider: ProviderConfig
    ) -> CaseResult:
        """Run one case ``repeats`` times on one provider and check every layer (in a span
        marked ``onejob.certification`` when the run is traced)."""
        if self._spans is None:
            return await self._run_case(client, contract, case, provider)
        with self._spans.run(
            "onejob.certification",
            certification=True,
            **{
                "certification.run_id": self.run_id,
                "certification.mode": self.mode.value,
                "certification.case": case.id,
                "contract": contract.name,
                "provider": provider.name,
                "model": provider.model,
            },
        ):
            return await self._run_case(client, contract, case, provider)

    async def _run_case(
        self, client: httpx.AsyncClient, contract: Contract, case: Case, provider: ProviderConfig
    ) -> CaseResult:
        t0 = time.perf_counter()
        if contract.checks_language:
            await language.ready()  # a no-op after ``run`` loaded it
        tape = Tape(provider.name, contract.name, case.id)
        CURRENT_TAPE.set(tape)  # this task's own context: the transport finds the case
        adapter = build_provider(provider, client)
        checks: dict[Layer, Check] = {}
        request: ProviderRequest | None = None
        wire: dict[str, Any] | None = None
        try:
            request = contract.provider_request(
                case.input, model=provider.model, timeout=provider.timeout, idempotency_key=None
            )
            build = getattr(adapter, "build", None)
            wire = build(request)[2] if callable(build) else None
        except Exception as exc:  # a template that cannot render is reported, not raised
            checks[Layer.RENDER] = Check(Layer.RENDER, False, f"cannot build the request: {exc}")
        if Layer.RENDER not in checks:
            checks[Layer.RENDER] = check_render(
                contract, case, provider, self._tokenizer(provider), wire, request
            )
        variant = case if isinstance(case, Variant) else None
        variant_of = variant.origin if variant else None
        relations = variant.relations if variant else ()
        if request is None:
            for layer in CASE_LAYERS[1:]:
                checks[layer] = not_reached(layer, Layer.RENDER)
            return CaseResult(
                contract.name,
                provider.name,
                case.id,
                checks,
                [],
                0.0,
                variant_of=variant_of,
                relations=relations,
            )

        per_repeat: list[dict[Layer, Check]] = []
        outputs: list[Any] = []
        facts: list[CallFacts] = []
        error: str | None = None
        for r in range(self.repeats):
            keyed = dataclasses.replace(
                request, idempotency_key=self.downstream_key(contract, case, r)
            )
            layers, output, error, call = await one_call(
                adapter, provider, contract, case, keyed, self._tokenizer(provider)
            )
            per_repeat.append(layers)
            outputs.append(output)
            facts.append(call)
            if error is not None:
                break
        if self.mode is Mode.RECORD and tape.interactions and variant is None:
            write_cassette(
                self.cassette_root,
                tape,
                {
                    "recorded_from": (
                        self.recorded_from
                        if isinstance(self.recorded_from, str)
                        else self.recorded_from(provider)
                    ),
                    "protocol": provider.protocol,
                    "model": provider.model,
                    "contract_fingerprint": contract.fingerprint,
                    "run_id": self.run_id,
                },
            )
        for layer in (Layer.TRANSPORT, Layer.SCHEMA, Layer.MODEL, Layer.SEMANTICS):
            checks[layer] = aggregate(layer, per_repeat)
        repeat_passed = [all(layers[lyr].passed for lyr in CALL_LAYERS) for layers in per_repeat]
        provider_ids = [f.provider_id for f in facts]
        checks[Layer.STABILITY] = check_stability(contract, repeat_passed, outputs)
        if checks[Layer.STABILITY].passed and self.mode is not Mode.REPLAY:
            # Replay mode serves one recording to every repeat by design; elsewhere a
            # repeated provider id means one answer was served twice.
            earlier = self._earlier_ids(provider.name, contract.name) if self._earlier_ids else {}
            checks[Layer.STABILITY] = (
                check_replays(provider_ids, earlier) or checks[Layer.STABILITY]
            )
        return CaseResult(
            contract.name,
            provider.name,
            case.id,
            checks,
            outputs,
            time.perf_counter() - t0,
            error,
            provider_ids=provider_ids,
            models=[f.model for f in facts],
            valid=[layers[Layer.MODEL].passed for layers in per_repeat],
            omitted_parameters=tuple(sorted({p for f in facts for p in f.omitted_parameters})),
            usage=[f.usage for f in facts],
            variant_of=variant_of,
            relations=relations,
        )

    def downstream_key(self, contract: Contract, case: Case, repeat: int) -> str:
        """Return the ``Idempotency-Key`` of one repeat (0-based) of one case in this run."""
        return f"certify/{self.run_id}/{contract.name}/{case.id}/{repeat + 1}"


def _valid_output(result: CaseResult) -> Any:
    """Return the first repeat's output when it passed the model layer, else None."""
    if result.outputs and result.checks[Layer.MODEL].passed:
        return result.outputs[0]
    return None
