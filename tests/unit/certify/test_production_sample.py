"""A fallback's answers on production inputs, judged (issue 48): the verdicts, what is kept,
and the traffic the end-to-end test runs on."""

from __future__ import annotations

import json
from typing import Any

from certify.production import (
    AGREED,
    DISAGREED,
    ERROR,
    ProductionDraw,
    ProductionResult,
    ProductionSample,
    describe,
    judge_sample,
)
from certify.traffic import ticket_traffic
from contracts.loader import load_catalog
from contracts.variants import draw_variants
from providers.base import BadOutput, DefiniteFailure, ProviderRequest, ProviderResult, Usage
from providers.config import ProviderConfig

CATALOG = load_catalog()
TRIAGE = CATALOG["ticket-triage@1"]
FALLBACK = ProviderConfig(name="f", protocol="openai", base_url="http://f/v1", model="gpt-4o")


class Answers:
    """A fallback that answers ``answer(input)``, or raises ``error``."""

    def __init__(self, answer: Any = None, error: Exception | None = None, model: str = "gpt-4o"):
        self.answer, self.error, self.model = answer, error, model
        self.keys: list[str | None] = []

    async def call(self, request: ProviderRequest) -> ProviderResult:
        self.keys.append(request.idempotency_key)
        if self.error is not None:
            raise self.error
        value = json.loads(request.user.rsplit("<input", 1)[1].split(">", 1)[1].rsplit("</", 1)[0])
        out = self.answer(value)
        return ProviderResult(out, json.dumps(out), "r", Usage(), "stop", 0.01, self.model)


def sample(n: int = 0) -> ProductionSample:
    value = ticket_traffic(TRIAGE, "unit", n + 1)[n]
    return ProductionSample(f"job{n}", value, TRIAGE.simulate(value))


async def test_each_answer_is_judged_against_the_primarys_result_and_kept_as_names() -> None:
    fallback = Answers(TRIAGE.simulate)
    agreed = await judge_sample(fallback, FALLBACK, TRIAGE, sample(), "certify/r/c/production/1")
    assert agreed.outcome == AGREED and agreed.fields == ()
    assert fallback.keys == ["certify/r/c/production/1"]
    wrong = await judge_sample(Answers(TRIAGE.simulate_sloppy), FALLBACK, TRIAGE, sample(), "k")
    assert wrong.outcome == DISAGREED and wrong.fields == ("category",)
    assert len(wrong.hashes["category"]) == 2 and len(wrong.input_sha256) == 12
    other = await judge_sample(
        Answers(TRIAGE.simulate, model="gpt-3"), FALLBACK, TRIAGE, sample(), "k"
    )
    assert other.fields == ("transport:model",)
    prose = await judge_sample(
        Answers(error=BadOutput("x", reason="not_json")), FALLBACK, TRIAGE, sample(), "k"
    )
    assert prose.outcome == DISAGREED and prose.fields == ("contract:(not JSON)",)
    down = await judge_sample(
        Answers(error=DefiniteFailure("no", reason="status_400")), FALLBACK, TRIAGE, sample(), "k"
    )
    assert down.outcome == ERROR and down.error is not None


def result(outcomes: list[str], *, wanted: int = 50, min_samples: int = 4) -> ProductionResult:
    from certify.production import ProductionCheck

    draw = ProductionDraw(
        "ticket-triage@1", "p", ("f",), wanted, tuple(sample(0) for _ in outcomes),
        threshold=0.5, min_samples=min_samples,
    )  # fmt: skip
    checks = [ProductionCheck(o, "h", ("category",) if o == DISAGREED else ()) for o in outcomes]
    return ProductionResult(draw, checks)


def test_the_threshold_applies_from_min_samples_judged_and_errors_are_not_counted() -> None:
    refused = result([DISAGREED, DISAGREED, AGREED, AGREED, ERROR])
    assert refused.verdict() == "refused" and not refused.check().passed
    assert (
        "production sample 5/50 of p's jobs: 4 judged, 2 disagreed (50% >="
        in refused.check().reason
    )
    assert "on category (2)" in refused.check().reason
    assert result([DISAGREED, AGREED, AGREED, AGREED]).verdict() == "passed"
    few = result([DISAGREED, DISAGREED, ERROR, ERROR])
    assert few.verdict() == "not judged" and few.check().passed
    assert describe(few.as_dict()).endswith(
        "2 judged, 2 disagreed, 2 without an answer; not judged (fewer than 4 judged): "
        "certified on the catalog and its variants alone"
    )
    record = refused.as_dict()
    assert record["fields"] == {"category": 2} and record["errors"] == 1
    assert "input" not in json.dumps(record).replace("input_sha256", "")


def test_the_traffic_is_seeded_valid_and_unlike_the_catalog_while_variants_resemble_it() -> None:
    traffic = ticket_traffic(TRIAGE, "seed", 300)
    assert traffic == ticket_traffic(TRIAGE, "seed", 300)
    assert traffic != ticket_traffic(TRIAGE, "other", 300)
    assert all(not TRIAGE.validate_input(t) for t in traffic)
    assert not any(TRIAGE.resembles_catalog(t) for t in traffic)
    assert len({TRIAGE.simulate(t)["category"] for t in traffic}) == 8  # every category
    assert len({TRIAGE.simulate(t)["language"] for t in traffic}) >= 4
    variants = [v for seed in range(20) for v in draw_variants(TRIAGE, f"s{seed}", 8)]
    assert all(TRIAGE.resembles_catalog(v.input) for v in variants)
    assert all(TRIAGE.simulate_suite_cache(v.input) == TRIAGE.simulate(v.input) for v in variants)
    assert all(TRIAGE.simulate_suite_cache(t) != TRIAGE.simulate(t) for t in traffic[:50])
