// The failover matrix the gateway uses (GET /v1/certifications), per contract, and the
// certificate behind each verdict: the certification report of one provider on one contract.

import { api } from "./api.js";
import { age, badge, fill, h, td, when } from "./dom.js";

function certificateLink(contract, provider, text) {
  return h("a", { href: `#/certificate/${encodeURIComponent(contract)}/${encodeURIComponent(provider)}` }, text);
}

function certCell(label, row, provider, cert) {
  if (!cert) return td(label, h("span", { class: "muted" }, "no certificate"));
  return td(
    label,
    badge(cert.verdict, cert.verdict),
    " ",
    h("span", {}, `certified ${when(cert.certified_at)}`),
    h("br"),
    h("span", {}, `expires ${when(cert.expires_at)} (${age(cert.expires_at)})`),
    h("br"),
    certificateLink(row.contract, provider, `${provider} report`),
  );
}

export async function renderMatrix(view) {
  const { certifications: rows } = await api("/v1/certifications");
  const contracts = [...new Set(rows.map((r) => r.contract))];
  fill(
    view,
    h("h1", {}, "Failover matrix"),
    h(
      "p",
      { class: "muted" },
      "Which fallback may replace which primary, per contract, as this gateway decides it now. ",
      "A fallback is used only when both providers hold an unexpired passing certificate for the ",
      "contract's current fingerprint; the reason words are those of ",
      h("code", {}, "onejob can-i-failover"),
      ".",
    ),
    rows.length ? null : h("p", { class: "notice" }, "No route names a fallback: nothing can fail over."),
    contracts.map((contract) => {
      const mine = rows.filter((r) => r.contract === contract);
      const fingerprint = mine[0].fingerprint;
      return h(
        "section",
        { class: "contract", "data-contract": contract },
        h("h2", {}, contract),
        fingerprint ? h("p", { class: "muted" }, "Contract fingerprint ", h("code", { title: fingerprint }, fingerprint.slice(0, 16)), "…") : null,
        h(
          "div",
          { class: "table-wrap" },
          h(
            "table",
            { class: "cards matrix" },
            h("thead", {}, h("tr", {}, ["Primary → fallback", "Failover", "Why", "Primary certificate", "Fallback certificate"].map((c) => h("th", { scope: "col" }, c)))),
            h(
              "tbody",
              {},
              mine.map((row) =>
                h(
                  "tr",
                  { "data-fallback": row.fallback, "data-allowed": String(row.allowed) },
                  td("Primary → fallback", `${row.primary} → ${row.fallback}`),
                  td("Failover", badge(row.allowed ? "allowed" : "refused")),
                  td("Why", h("strong", { class: "reason" }, row.reason), row.detail ? [h("br"), h("span", { class: "muted" }, row.detail)] : null),
                  certCell("Primary certificate", row, row.primary, row.primary_certificate),
                  certCell("Fallback certificate", row, row.fallback, row.fallback_certificate),
                ),
              ),
            ),
          ),
        ),
      );
    }),
  );
  return null;
}

export async function renderCertificate(view, ctx, contract, provider) {
  const { certifications: rows } = await api("/v1/certifications");
  const row = rows.find((r) => r.contract === contract && (r.fallback === provider || r.primary === provider));
  const cert = row ? (row.fallback === provider ? row.fallback_certificate : row.primary_certificate) : null;
  const title = `${provider} on ${contract}`;
  const back = h("p", {}, h("a", { href: "#/matrix" }, "← Failover matrix"));
  if (!cert) {
    fill(view, back, h("h1", {}, `Certificate: ${title}`), h("p", { class: "notice warn" }, "No live or record certificate is on file: this provider cannot take part in a failover for this contract."));
    return null;
  }
  const current = row.fingerprint && cert.contract_fingerprint === row.fingerprint;
  const rates = Object.entries(cert.pass_rates || {});
  const failures = cert.failures || [];
  fill(
    view,
    back,
    h("h1", {}, `Certificate: ${title}`),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "Verdict"), h("dd", {}, badge(cert.verdict, cert.verdict)),
      h("dt", {}, "Mode"), h("dd", {}, cert.mode),
      h("dt", {}, "Model"), h("dd", {}, cert.model),
      h("dt", {}, "Adapter"), h("dd", {}, cert.adapter_version),
      h("dt", {}, "Certified"), h("dd", {}, when(cert.certified_at)),
      h("dt", {}, "Expires"), h("dd", {}, `${when(cert.expires_at)} (${age(cert.expires_at)})`),
      h("dt", {}, "Cases × repeats"), h("dd", {}, `${cert.cases ?? "?"} × ${cert.repeats ?? "?"}`),
      h("dt", {}, "Fingerprint"),
      h("dd", {}, h("code", {}, cert.contract_fingerprint), " ", current ? badge("current", "pass") : badge("not the contract's current fingerprint", "fail")),
    ),
    h("h2", {}, "Pass rate per check layer"),
    rates.length
      ? h("div", { class: "table-wrap" }, h("table", { class: "cards" }, h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Layer"), h("th", { scope: "col" }, "Passed"))), h("tbody", {}, rates.map(([layer, rate]) => h("tr", {}, td("Layer", layer), td("Passed", `${Math.round(rate * 100)}%`))))))
      : h("p", { class: "muted" }, "No per-layer rates recorded."),
    h("h2", {}, "Failures"),
    failures.length
      ? h(
          "div",
          { class: "table-wrap" },
          h(
            "table",
            { class: "cards" },
            h("thead", {}, h("tr", {}, ["Case", "Layer", "Reason", "Output"].map((c) => h("th", { scope: "col" }, c)))),
            h("tbody", {}, failures.map((f) => h("tr", {}, td("Case", f.case), td("Layer", f.layer), td("Reason", f.reason), td("Output", f.excerpt ? h("code", {}, f.excerpt) : "–")))),
          ),
        )
      : h("p", { class: "muted" }, "None."),
    h("p", { class: "muted" }, "The full run report (every provider × contract) is ", h("code", {}, "contracts.html"), " in the report directory of the ", h("code", {}, "onejob certify"), " run that wrote this certificate."),
  );
  return null;
}
