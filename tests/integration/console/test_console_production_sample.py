"""The console's failover matrix shows a fallback's production sample (issue 48): in the
certificate cell of the matrix, and on the certificate's page beside its pass rates."""

from __future__ import annotations

from typing import Any

from playwright.async_api import expect

from contracts.registry import CertificationRegistry

from .test_console_in_chromium import sign_in

SAMPLE = {
    "primary": "sim-openai", "wanted": 50, "drawn": 50, "calls": 50, "judged": 50,
    "disagreed": 48, "errors": 0, "disagreement_rate": 0.96, "threshold": 0.2,
    "min_samples": 20, "verdict": "refused", "fields": {"category": 48},
    "disagreements": [], "skipped": None,
}  # fmt: skip
SHOWN = (
    "production sample 50/50 of sim-openai's jobs: 48 of 50 judged disagreed (96% on "
    "category); refused at 20%"
)


async def test_the_matrix_shows_the_fallbacks_production_sample(
    stack: Any, open_page: Any, tmp_path: Any
) -> None:
    registry = CertificationRegistry(tmp_path / "certs.json")
    cert = registry.latest_certificate("ticket-triage@1", "sim-anthropic")
    assert cert is not None
    rates = {**cert["pass_rates"], "production:sim-openai": 0.04}
    registry.record([{**cert, "verdict": "fail", "production": [SAMPLE], "pass_rates": rates}])

    page, watched = await open_page()
    await sign_in(page, stack.url, stack.key)
    await page.get_by_role("link", name="Failover matrix").click()
    row = page.locator("section[data-contract='ticket-triage@1'] tr[data-fallback='sim-anthropic']")
    await expect(row).to_have_attribute("data-allowed", "false")
    production = row.locator("[data-production='refused']")
    await expect(production).to_have_text(SHOWN)
    await row.get_by_role("link", name="sim-anthropic report").click()
    facts = page.locator("dl.facts dd.production")
    await expect(facts).to_have_text(SHOWN)
    await expect(page.locator("table.cards")).to_contain_text("production:sim-openai")
    assert watched.errors == [], watched.errors
