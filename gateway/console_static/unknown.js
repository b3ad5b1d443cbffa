// Unknown attempts (admin): every owner's attempts whose outcome nobody knows, and the
// out-of-band resolution: failed, cancelled, or succeeded with a result the server checks
// against the contract. The list polls, so resolutions made elsewhere disappear from it.

import { api, describe } from "./api.js";
import { age, every, fill, h, keepingFocus, stamp, td, when } from "./dom.js";

const REFRESH_MS = 2000;
const OUTCOMES = [
  ["failed", "failed", "the provider did not do the work; a certified fallback may be tried next"],
  ["cancelled", "cancelled", "give up on this attempt; nothing is retried"],
  ["succeeded", "succeeded", "the provider did the work: give its result, checked against the contract"],
];

export async function renderUnknown(view) {
  const filter = h("input", { type: "search", id: "unknown-filter", "aria-describedby": "unknown-count" });
  const count = h("p", { id: "unknown-count", class: "muted", role: "status" });
  const region = h("div", { id: "unknown-region" });
  const message = h("p", { class: "error", role: "alert" });
  const outcome = h("div", { id: "resolve-outcome", role: "status" });
  fill(
    view,
    h("h1", {}, "Unknown attempts"),
    h(
      "p",
      { class: "muted" },
      "Attempts whose outcome is unknown (deadline passed, connection lost, worker gone). ",
      "Each blocks new attempts on its job until someone resolves it.",
    ),
    h(
      "div",
      { class: "toolbar" },
      h("div", { class: "field" }, h("label", { for: "unknown-filter" }, "Filter by owner, job, contract or provider"), filter),
      h("button", { type: "button", onclick: () => load() }, "Refresh"),
    ),
    outcome,
    message,
    count,
    region,
  );
  let attempts = [];

  function draw() {
    const words = filter.value.trim().toLowerCase().split(/\s+/).filter(Boolean);
    const shown = attempts.filter((a) => {
      const text = [a.owner, a.job_id, a.contract, a.provider, a.id, a.lease_owner].join(" ").toLowerCase();
      return words.every((w) => text.includes(w));
    });
    count.textContent = attempts.length === shown.length ? `${attempts.length} unknown attempt(s).` : `${shown.length} of ${attempts.length} unknown attempt(s) match the filter.`;
    keepingFocus(region, () => fill(region, table(shown, openResolve)));
  }

  async function load() {
    try {
      attempts = (await api("/v1/admin/attempts?state=unknown&limit=200")).attempts;
      message.textContent = "";
    } catch (error) {
      message.textContent = describe(error);
      return;
    }
    draw();
  }

  function openResolve(attempt, opener) {
    resolveDialog(attempt, opener, async (result) => {
      fill(
        outcome,
        h(
          "p",
          { class: "notice" },
          `Resolved attempt #${result.attempt.number} of `,
          h("a", { href: `#/jobs/${encodeURIComponent(result.attempt.job_id)}` }, result.attempt.job_id),
          ` as ${result.attempt.state}; the job is now ${result.job ? result.job.status : "unchanged"}.`,
        ),
      );
      await load();
    });
  }

  filter.addEventListener("input", draw);
  await load();
  return every(REFRESH_MS, load);
}

function table(attempts, onResolve) {
  if (!attempts.length) return h("p", { class: "notice", id: "no-unknown" }, "No unknown attempts.");
  // "What the reconciler last found" exists only once the API reports it (issue 13).
  const reconciler = attempts.some((a) => a.reconciler !== undefined);
  const now = Date.now();
  // Both ids sit in one column (the attempt's under its job's): side by side, two ULIDs
  // alone would push the Resolve button past a 1280 px screen.
  const columns = ["Owner", "Job and attempt", "Contract", "Provider", "Attempt", "Age", "Deadline", "Lease holder"];
  if (reconciler) columns.push("Reconciler last found");
  columns.push("Action");
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: "cards", id: "unknown-table" },
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, c)))),
      h(
        "tbody",
        {},
        attempts.map((a) => {
          const button = h("button", { type: "button", "data-focus-key": `resolve-${a.id}`, "aria-label": `Resolve attempt ${a.number} of ${a.job_id}` }, "Resolve…");
          button.addEventListener("click", () => onResolve(a, button));
          return h(
            "tr",
            { "data-attempt": a.id },
            td("Owner", a.owner || "–"),
            td(
              "Job and attempt",
              h("a", { href: `#/jobs/${encodeURIComponent(a.job_id)}`, class: "mono id", "data-focus-key": `job-${a.id}` }, a.job_id),
              h("br"),
              h("span", { class: "mono id muted" }, a.id),
            ),
            td("Contract", a.contract || "–"),
            td("Provider", a.provider),
            td("Attempt", `#${a.number} (${a.reason})`),
            td("Age", age(a.created_at, now)),
            td("Deadline", stamp(a.deadline_at), h("br"), h("span", { class: "muted" }, age(a.deadline_at, now))),
            td("Lease holder", h("span", { class: "breakable" }, a.lease_owner || "–")),
            reconciler ? td("Reconciler last found", reconcilerFinding(a.reconciler, now)) : null,
            td("Action", button),
          );
        }),
      ),
    ),
  );
}

/** Say what the reconciler last found: its finding, when, and the completion id or message. */
function reconcilerFinding(found, now) {
  if (found === null || found === undefined) return "–";
  if (typeof found === "string") return h("span", { class: "breakable" }, found);
  return [
    h("span", { class: "breakable" }, found.finding || "asked"),
    found.last_checked_at ? [h("br"), h("span", { class: "muted" }, age(found.last_checked_at, now))] : null,
    found.completion_id ? [h("br"), h("span", { class: "mono breakable" }, found.completion_id)] : null,
    found.message ? [h("br"), h("span", { class: "muted breakable" }, found.message)] : null,
  ];
}

/** Ask for an outcome and a note, then for a confirmation, then resolve. */
function resolveDialog(attempt, opener, onDone) {
  const radios = OUTCOMES.map(([value, text, help]) =>
    h("div", {}, h("label", { class: "choice" }, h("input", { type: "radio", name: "outcome", value, required: true }), h("span", {}, h("strong", {}, text), h("span", { class: "muted" }, ` — ${help}`)))),
  );
  const resultBox = h("textarea", { id: "resolve-result", spellcheck: "false", "aria-describedby": "resolve-result-hint" });
  const resultField = h(
    "div",
    { hidden: true },
    h("label", { for: "resolve-result" }, "Result (JSON)"),
    resultBox,
    h("p", { class: "hint", id: "resolve-result-hint" }, `The server checks it against ${attempt.contract || "the contract"}'s output schema; if another attempt already won, this one is recorded as lost.`),
  );
  const note = h("textarea", { id: "resolve-note", required: true, "aria-describedby": "resolve-note-hint" });
  const error = h("p", { class: "error", role: "alert", id: "resolve-error" });
  const review = h("button", { type: "submit", class: "primary" }, "Review");
  const cancel = h("button", { type: "button" }, "Close without resolving");
  const choose = h(
    "form",
    { method: "dialog", novalidate: true },
    h("fieldset", {}, h("legend", {}, "Outcome"), radios),
    resultField,
    h("label", { for: "resolve-note" }, "Note (why; kept in the job's audit trail)"),
    note,
    h("p", { class: "hint", id: "resolve-note-hint" }, "For example: the provider's dashboard shows no such request."),
    error,
    h("div", { class: "actions" }, review, cancel),
  );
  const confirmText = h("p", { id: "resolve-confirm-text" });
  const confirm = h("button", { type: "button", class: "danger", id: "resolve-confirm" }, "Confirm");
  const back = h("button", { type: "button" }, "Back");
  const confirmStep = h("div", { hidden: true }, confirmText, h("div", { class: "actions" }, confirm, back));
  const dialog = h(
    "dialog",
    { id: "resolve-dialog", "aria-labelledby": "resolve-title" },
    h("h2", { id: "resolve-title" }, `Resolve attempt #${attempt.number} of ${attempt.job_id}`),
    h("p", { class: "muted" }, `${attempt.provider}, owner ${attempt.owner || "?"}, unknown since its deadline ${when(attempt.deadline_at)}.`),
    choose,
    confirmStep,
  );
  let body = null;

  const picked = () => choose.querySelector("input[name=outcome]:checked")?.value;
  choose.addEventListener("change", () => {
    resultField.hidden = picked() !== "succeeded";
  });
  choose.addEventListener("submit", (event) => {
    event.preventDefault();
    error.textContent = "";
    const outcome = picked();
    if (!outcome) {
      error.textContent = "Choose an outcome.";
      choose.querySelector("input[name=outcome]").focus();
      return;
    }
    if (!note.value.trim()) {
      error.textContent = "Write a note saying why.";
      note.focus();
      return;
    }
    body = { outcome, note: note.value.trim() };
    if (outcome === "succeeded") {
      try {
        body.result = JSON.parse(resultBox.value);
      } catch (e) {
        error.textContent = `The result is not JSON: ${e.message}`;
        resultBox.focus();
        return;
      }
    }
    confirmText.textContent = `Resolve attempt #${attempt.number} of ${attempt.job_id} on ${attempt.provider} as ${outcome}? This cannot be undone. Note: “${body.note}”.`;
    confirm.textContent = `Confirm: resolve as ${outcome}`;
    choose.hidden = true;
    confirmStep.hidden = false;
    confirm.focus();
  });
  back.addEventListener("click", () => {
    confirmStep.hidden = true;
    choose.hidden = false;
    review.focus();
  });
  cancel.addEventListener("click", () => dialog.close());
  confirm.addEventListener("click", async () => {
    confirm.disabled = true;
    try {
      const result = await api(`/v1/admin/attempts/${encodeURIComponent(attempt.id)}/resolve`, { method: "POST", body });
      dialog.close();
      await onDone(result);
    } catch (e) {
      error.textContent = e.status === 409 ? `Not resolved: ${e.message} (someone may have resolved it already).` : `Not resolved: ${describe(e)}`;
      confirmStep.hidden = true;
      choose.hidden = false;
      (e.status === 422 && body.outcome === "succeeded" ? resultBox : review).focus();
    } finally {
      confirm.disabled = false;
    }
  });
  dialog.addEventListener("close", () => {
    dialog.remove();
    // Give focus back to where the operator was, or to the heading if that row is gone.
    if (opener.isConnected) opener.focus();
    else {
      const again = document.querySelector(`[data-focus-key="resolve-${CSS.escape(attempt.id)}"]`);
      (again || document.querySelector("#view h1"))?.focus();
    }
  });
  document.body.append(dialog);
  dialog.showModal();
  radios[0].querySelector("input").focus();
}
