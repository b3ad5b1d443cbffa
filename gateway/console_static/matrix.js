// The failover matrix the gateway uses (GET /v1/certifications), per contract, with each
// pair's providers' capacity now (GET /v1/providers: an open circuit, a pause), and the
// certificate behind each verdict: the certification report of one provider on one contract.

import { api, describe } from "./api.js";
import { clock, providerCapacity } from "./capacity.js";
import { age, badge, every, fill, h, keepingFocus, stamp, td, when } from "./dom.js";

const CAPACITY_REFRESH_MS = 3000; // a circuit opens and closes in seconds: follow it

function certificateLink(contract, provider, text) {
  return h("a", { href: `#/certificate/${encodeURIComponent(contract)}/${encodeURIComponent(provider)}` }, text);
}

function percent(rate) {
  return typeof rate === "number" ? `${Math.round(rate * 100)}%` : "?";
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

/** "expires in 3 days", "expires in 5 hours", "expired 2 days ago", from days (may be < 0). */
export function expiresIn(days) {
  if (typeof days !== "number") return "no expiry";
  if (days <= 0) {
    const ago = -days;
    return ago < 1 ? `expired ${plural(Math.max(1, Math.round(ago * 24)), "hour")} ago` : `expired ${plural(Math.round(ago), "day")} ago`;
  }
  return days < 1 ? `expires in ${plural(Math.max(1, Math.round(days * 24)), "hour")}` : `expires in ${plural(Math.round(days), "day")}`;
}

/** The pair's expiry mark: expired, re-certify due, or none. */
function expiryMark(row) {
  if (typeof row.days_to_expiry === "number" && row.days_to_expiry <= 0) return badge("expired", "expired");
  if (row.recertify_due) return badge("re-certify due", "due");
  return null;
}

/** What a field count map says: "category (9), priority (2)". */
function fieldList(fields) {
  const entries = Object.entries(fields || {}).sort(([a], [b]) => a.localeCompare(b));
  return entries.length ? entries.map(([name, n]) => `${name} (${n})`).join(", ") : "none named";
}

function certCell(label, row, provider, cert) {
  if (!cert) return td(label, h("span", { class: "muted" }, "no certificate"));
  const soon = typeof cert.days_to_expiry === "number" && row.recertify_due && cert.expires_at === row.expires_at;
  return td(
    label,
    badge(cert.verdict, cert.verdict),
    " ",
    h("span", {}, "certified ", stamp(cert.certified_at)),
    h("br"),
    h("span", { class: soon ? "soon" : null }, "expires ", stamp(cert.expires_at), ` (${age(cert.expires_at)})`),
    cert.run_id ? [h("br"), h("span", { class: "muted" }, "run ", h("code", {}, cert.run_id))] : null,
    cert.production && cert.production.length ? [h("br"), productionFacts(cert)] : null,
    h("br"),
    certificateLink(row.contract, provider, `${provider} report`),
  );
}

/** One production sample record (certify --production N, issue 48), as a sentence. */
function productionText(p) {
  if (p.verdict === "skipped") return `production sample of ${p.primary}'s jobs: skipped (${p.skipped})`;
  const head = `production sample ${p.drawn}/${p.wanted} of ${p.primary}'s jobs: ${p.disagreed} of ${p.judged} judged disagreed`;
  if (p.verdict === "not judged") return `${head}; not judged (fewer than ${p.min_samples}): certified on the catalog alone`;
  const fields = Object.keys(p.fields || {});
  return `${head} (${percent(p.disagreement_rate)}${fields.length ? ` on ${fields.join(", ")}` : ""}); ${p.verdict} at ${percent(p.threshold)}`;
}

/** What a certificate's production samples showed, beside its variants and usage. */
function productionFacts(cert) {
  const records = cert.production || [];
  if (!records.length) return h("span", { class: "muted" }, "none (certify --production N)");
  return records.map((p, i) => [i ? h("br") : null, h("span", { class: "production", "data-production": p.verdict }, productionText(p))]);
}

function whyCell(row) {
  const s = row.suspended;
  if (!s) return td("Why", h("strong", { class: "reason" }, row.reason), row.detail ? [h("br"), h("span", { class: "muted" }, row.detail)] : null);
  return td(
    "Why",
    h("strong", { class: "reason" }, row.reason),
    h(
      "dl",
      { class: "suspension" },
      h("dt", {}, "Since"), h("dd", {}, `${when(s.since)} (${age(s.since)})`),
      h("dt", {}, "Disagreed"),
      h("dd", { class: "rate" }, `${percent(s.disagreement_rate)} of shadow checks, threshold ${percent(s.threshold)}`),
      h("dt", {}, "Checks"), h("dd", {}, `${s.disagreements} of ${s.checks} disagreed (judged from ${s.min_samples})`),
      h("dt", {}, "Fields"), h("dd", { class: "fields" }, fieldList(s.fields)),
      h("dt", {}, "By"), h("dd", {}, s.by || "–"),
      h("dt", {}, "Against"), h("dd", {}, `${row.fallback}'s certificate of run `, h("code", {}, s.fallback_run_id || "unknown")),
    ),
    h("span", { class: "muted" }, `Failover is refused until ${row.fallback} is certified again for ${row.contract}.`),
  );
}

function shadowCell(row) {
  const t = row.shadow;
  if (!t) return td("Shadow checks", h("span", { class: "muted" }, "not run (off, or the contract is not hedgeable)"));
  const judged = t.checks >= t.min_samples;
  return td(
    "Shadow checks",
    h("strong", { class: "rate" }, t.disagreement_rate === null || t.disagreement_rate === undefined ? "no checks yet" : `${percent(t.disagreement_rate)} disagree`),
    " ",
    h("span", {}, t.checks ? `(${t.disagreements} of ${plural(t.checks, "check")}; threshold ${percent(t.threshold)})` : `(threshold ${percent(t.threshold)})`),
    Object.keys(t.fields || {}).length ? [h("br"), h("span", {}, "on ", fieldList(t.fields))] : null,
    t.errors ? [h("br"), h("span", { class: "muted" }, `${plural(t.errors, "call")} failed, not judged`)] : null,
    h("br"),
    h("span", { class: "muted" }, `sampling ${percent(t.sample_rate)} of jobs since ${when(t.since)}`, judged ? "" : `; too few to judge (needs ${t.min_samples})`),
  );
}

/** A latency in milliseconds as people read it: "420 ms", "1.2 s", "41 s". */
export function duration(ms) {
  if (typeof ms !== "number") return "?";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  return s < 10 ? `${s.toFixed(1).replace(/\.0$/, "")} s` : `${Math.round(s).toLocaleString("en")} s`;
}

/** US dollars without trailing zeros, like the reports: "$0.0004". */
export function dollars(amount) {
  return `$${amount.toFixed(8).replace(/0+$/, "").replace(/\.$/, "")}`;
}

function tokens(n) {
  return `${Math.round(n).toLocaleString("en")}`;
}

/** What the contract's budget allows of one figure, or null when it does not limit it. */
function limit(row, key) {
  const value = row.budget ? row.budget[key] : null;
  return typeof value === "number" ? value : null;
}

/**
 * One figure of the fallback, against the primary's and the budget:
 * "p95 1.2 s (primary 400 ms; budget 20 s)", marked when over the budget.
 */
function figure(row, key, name, show, label, unknown) {
  const mine = row.fallback_certificate && row.fallback_certificate.usage;
  const theirs = row.primary_certificate && row.primary_certificate.usage;
  const value = mine ? mine[key] : null;
  const cap = limit(row, key);
  const over = Boolean(mine && mine.over_budget.includes(key));
  const primaryOver = Boolean(theirs && theirs.over_budget.includes(key));
  const context = [];
  if (theirs) context.push(typeof theirs[key] === "number" ? `primary ${show(theirs[key])}${primaryOver ? ", over budget" : ""}` : `primary ${unknown}`);
  context.push(cap === null ? `no ${name} budget` : `budget ${show(cap)}`);
  return h(
    "span",
    { class: `figure ${name}${over ? " over" : ""}`, "data-figure": key },
    typeof value === "number" ? label(show(value)) : h("span", { class: "muted" }, unknown),
    over ? [" ", badge("over budget", "over")] : null,
    " ",
    h("span", { class: "versus" }, `(${context.join("; ")})`),
  );
}

function usageCell(row) {
  const mine = row.fallback_certificate && row.fallback_certificate.usage;
  const theirs = row.primary_certificate && row.primary_certificate.usage;
  if (!mine && !theirs) {
    return td("Latency & cost", h("span", { class: "muted" }, "not recorded (certificates written before budgets)"));
  }
  const calls = mine && typeof mine.calls === "number" ? `fallback's ${plural(mine.calls, "call")} at certification` : null;
  return td(
    "Latency & cost",
    mine ? null : [h("span", { class: "muted" }, `${row.fallback}'s certificate records none`), h("br")],
    figure(row, "latency_p95_ms", "latency", duration, (v) => `p95 ${v}`, "p95 unknown"),
    h("br"),
    figure(row, "output_tokens_per_case", "tokens", tokens, (v) => `${v} output tokens/case`, "tokens unknown"),
    h("br"),
    figure(row, "cost_per_case_usd", "cost", dollars, (v) => `${v}/case`, "cost unknown: no price given"),
    calls ? [h("br"), h("span", { class: "muted" }, calls)] : null,
  );
}

/** A certificate's own figures, for its page: "p50 180 ms, p95 400 ms; 62 output tokens/case; …". */
function usageFacts(cert, row) {
  const u = cert.usage;
  if (!u) return h("span", { class: "muted" }, "not recorded (written before budgets)");
  const over = (key) => (u.over_budget.includes(key) ? [" ", badge("over budget", "over")] : null);
  const budget = (key, show) => (limit(row, key) === null ? "" : ` (budget ${show(limit(row, key))})`);
  const verdict = cert.budget_verdict;
  return [
    h("span", { class: "figure" }, `p50 ${duration(u.latency_p50_ms)}, p95 ${duration(u.latency_p95_ms)}${budget("latency_p95_ms", duration)}`, over("latency_p95_ms")),
    "; ",
    h("span", { class: "figure" }, typeof u.output_tokens_per_case === "number" ? `${tokens(u.output_tokens_per_case)} output tokens/case` : "tokens unknown", budget("output_tokens_per_case", tokens), over("output_tokens_per_case")),
    "; ",
    h("span", { class: "figure" }, typeof u.cost_per_case_usd === "number" ? `${dollars(u.cost_per_case_usd)}/case` : "cost unknown: no price given", budget("cost_per_case_usd", dollars), over("cost_per_case_usd")),
    typeof u.calls === "number" ? ` (${plural(u.calls, "call")})` : null,
    verdict && !verdict.passed ? [h("br"), h("strong", { class: "reason" }, "failed its budget: "), verdict.reason] : null,
  ];
}

function expiryCell(row) {
  if (!row.expires_at) return td("Expires", h("span", { class: "muted" }, "– (a certificate is missing)"));
  return td("Expires", h("span", { class: "expiry" }, expiresIn(row.days_to_expiry)), " ", expiryMark(row), h("br"), h("span", { class: "muted" }, stamp(row.expires_at)));
}

/** The certificates behind the rows that are due, each once: the earlier one of its pair. */
function dueCertificates(rows) {
  const seen = new Map();
  for (const row of rows) {
    if (!row.recertify_due) continue;
    for (const [provider, cert] of [[row.primary, row.primary_certificate], [row.fallback, row.fallback_certificate]]) {
      if (!cert || cert.expires_at !== row.expires_at) continue;
      const key = `${row.contract}\u0000${provider}`;
      if (!seen.has(key)) seen.set(key, { contract: row.contract, provider, cert });
    }
  }
  return [...seen.values()].sort((a, b) => (a.cert.days_to_expiry ?? 0) - (b.cert.days_to_expiry ?? 0));
}

/** The providers whose circuit is open: nothing is sent to them until it may probe. */
function openCircuits(providers) {
  return providers.filter((p) => p.circuit === "open");
}

function circuitFacts(p) {
  const facts = [];
  if (p.consecutive_failures) facts.push(`${plural(p.consecutive_failures, "failure")} in a row`);
  if (p.waiting) facts.push(`${p.waiting} waiting`);
  if (p.queued) facts.push(`${p.queued} queued`);
  return facts.length ? ` (${facts.join("; ")})` : "";
}

function attention(rows, providers) {
  const suspended = rows.filter((r) => r.suspended);
  const due = dueCertificates(rows);
  const open = openCircuits(providers);
  if (!suspended.length && !due.length && !open.length) {
    return h(
      "section",
      { class: "attention ok", "aria-labelledby": "attention-title" },
      h("h2", { id: "attention-title" }, "Needs attention"),
      h("p", {}, "Nothing: no pair is suspended, no certificate is due for re-certification and no provider's circuit is open."),
    );
  }
  return h(
    "section",
    { class: "attention", "aria-labelledby": "attention-title" },
    h("h2", { id: "attention-title" }, "Needs attention"),
    h(
      "ul",
      {},
      open.length
        ? h(
            "li",
            { class: "circuit-summary" },
            h("strong", {}, `${plural(open.length, "provider")} with an open circuit`),
            ": ",
            open.map((p, i) => [i ? "; " : "", h("span", { class: "provider" }, p.name), ` until ${clock(p.circuit_until)}${circuitFacts(p)}`]),
            h("br"),
            h("span", { class: "muted" }, "Nothing is sent to it until then: its attempts fail over to a certified fallback, or wait."),
          )
        : null,
      suspended.length
        ? h(
            "li",
            { class: "suspended-summary" },
            h("strong", {}, `${plural(suspended.length, "pair")} suspended`),
            " by shadow checks: ",
            suspended.map((r, i) => [i ? "; " : "", h("span", { class: "pair" }, `${r.primary} → ${r.fallback} on ${r.contract}`), ` (${percent(r.suspended.disagreement_rate)} disagree, since ${when(r.suspended.since)})`]),
          )
        : null,
      due.length
        ? h(
            "li",
            { class: "due-summary" },
            h("strong", {}, `${plural(due.length, "certificate")} to re-certify`),
            ": ",
            due.map((d, i) => [
              i ? "; " : "",
              h("a", { href: `#/certificate/${encodeURIComponent(d.contract)}/${encodeURIComponent(d.provider)}`, "data-focus-key": `due-${d.contract}-${d.provider}` }, `${d.provider} on ${d.contract}`),
              ` ${expiresIn(d.cert.days_to_expiry)}`,
            ]),
          )
        : null,
    ),
  );
}

/** Each provider's capacity now (GET /v1/providers), or why it could not be read. */
async function providersNow() {
  try {
    const { providers } = await api("/v1/providers");
    return { providers, error: null };
  } catch (error) {
    return { providers: [], error };
  }
}

/** What a pair's providers' capacity says now: one line per provider with something to say. */
function pairCapacity(slot, row, byName) {
  const lines = [row.primary, row.fallback].map((name) => (byName.has(name) ? providerCapacity(byName.get(name)) : null));
  fill(slot, lines);
}

export async function renderMatrix(view) {
  const [{ certifications: rows }, first] = await Promise.all([api("/v1/certifications"), providersNow()]);
  const contracts = [...new Set(rows.map((r) => r.contract))];
  const attentionRegion = h("div", { id: "attention-region" });
  const capacityError = h("p", { class: "error", role: "alert", id: "capacity-error" });
  const slots = []; // [slot, row]: each pair's providers' capacity, refilled as it changes
  let seen = "";

  function show({ providers, error }) {
    const stamp = JSON.stringify([providers, error ? describe(error) : null, providers.map((p) => p.circuit_until && Date.parse(p.circuit_until) <= Date.now())]);
    if (stamp === seen) return;
    seen = stamp;
    capacityError.textContent = error ? `Provider capacity could not be read: ${describe(error)}` : "";
    const byName = new Map(providers.map((p) => [p.name, p]));
    keepingFocus(attentionRegion, () => fill(attentionRegion, attention(rows, providers)));
    for (const [slot, row] of slots) pairCapacity(slot, row, byName);
  }

  fill(
    view,
    h("h1", {}, "Failover matrix"),
    h(
      "p",
      { class: "muted" },
      "Which fallback may replace which primary, per contract, as this gateway decides it now. ",
      "A fallback is used only when both providers hold an unexpired passing certificate for the ",
      "contract's current fingerprint and no shadow-check suspension holds for the pair; the reason words are those of ",
      h("code", {}, "onejob can-i-failover"),
      ". Under each pair, its providers' circuit, pause, pace and queue when there is something to say.",
    ),
    capacityError,
    attentionRegion,
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
            h("thead", {}, h("tr", {}, ["Primary → fallback", "Failover", "Why", "Latency & cost", "Expires", "Shadow checks", "Primary certificate", "Fallback certificate"].map((c) => h("th", { scope: "col" }, c)))),
            h(
              "tbody",
              {},
              mine.map((row) => {
                const slot = h("div", { class: "capacity-now" });
                slots.push([slot, row]);
                return h(
                  "tr",
                  {
                    "data-fallback": row.fallback,
                    "data-allowed": String(row.allowed),
                    "data-suspended": String(Boolean(row.suspended)),
                    "data-recertify-due": String(Boolean(row.recertify_due)),
                    "data-over-budget": String(Boolean(row.fallback_certificate?.usage?.over_budget.length)),
                    class: row.suspended ? "suspended" : null,
                  },
                  td("Primary → fallback", h("span", { class: "pair-names" }, h("span", { class: "name" }, row.primary), " → ", h("span", { class: "name" }, row.fallback)), slot),
                  td("Failover", badge(row.allowed ? "allowed" : "refused"), row.suspended ? [" ", badge("suspended", "suspended")] : null),
                  whyCell(row),
                  usageCell(row),
                  expiryCell(row),
                  shadowCell(row),
                  certCell("Primary certificate", row, row.primary, row.primary_certificate),
                  certCell("Fallback certificate", row, row.fallback, row.fallback_certificate),
                );
              }),
            ),
          ),
        ),
      );
    }),
  );
  show(first);
  return every(CAPACITY_REFRESH_MS, async () => show(await providersNow()));
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
  const suspensions = rows.filter((r) => r.contract === contract && r.fallback === provider && r.suspended);
  const rates = Object.entries(cert.pass_rates || {});
  const failures = cert.failures || [];
  fill(
    view,
    back,
    h("h1", {}, `Certificate: ${title}`),
    suspensions.map((r) =>
      h(
        "p",
        { class: "notice warn suspension-notice" },
        badge("suspended", "suspended"),
        ` Failover from ${r.primary} to ${provider} is suspended since ${when(r.suspended.since)}: shadow checks disagreed in ${r.suspended.disagreements} of ${r.suspended.checks} (${percent(r.suspended.disagreement_rate)}, threshold ${percent(r.suspended.threshold)}) on ${fieldList(r.suspended.fields)}. Certify ${provider} again to clear it.`,
      ),
    ),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "Verdict"), h("dd", {}, badge(cert.verdict, cert.verdict)),
      h("dt", {}, "Mode"), h("dd", {}, cert.mode),
      h("dt", {}, "Model"), h("dd", {}, cert.model),
      h("dt", {}, "Adapter"), h("dd", {}, cert.adapter_version),
      h("dt", {}, "Certified"), h("dd", {}, stamp(cert.certified_at)),
      h("dt", {}, "Expires"), h("dd", {}, stamp(cert.expires_at), ` (${expiresIn(cert.days_to_expiry)})`),
      h("dt", {}, "Run"), h("dd", {}, cert.run_id ? h("code", {}, cert.run_id) : "–"),
      h("dt", {}, "Cases × repeats"), h("dd", {}, `${cert.cases ?? "?"} × ${cert.repeats ?? "?"}`),
      h("dt", {}, "Latency & cost"), h("dd", { class: "usage" }, usageFacts(cert, row)),
      h("dt", {}, "Production sample"), h("dd", { class: "production" }, productionFacts(cert)),
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
