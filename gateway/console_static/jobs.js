// Recent jobs: the caller's jobs (an admin: every owner's, or one owner's), newest first,
// with a status filter and cursor paging; and finding one job by its id or by owner + Idempotency-Key.

import { api, describe } from "./api.js";
import { waitingLine } from "./capacity.js";
import { badge, every, fill, h, keepingFocus, stamp, td } from "./dom.js";

const STATUSES = ["queued", "running", "unknown", "succeeded", "failed", "cancelled"];
const PAGE_SIZE = 20;
const REFRESH_MS = 3000;

// Kept across visits to the view, so "back" from a job returns to the same page.
const paging = { status: "", owner: "", cursors: [null] };

export async function renderJobs(view, ctx) {
  const status = h(
    "select",
    { id: "status-filter" },
    h("option", { value: "" }, "any status"),
    STATUSES.map((s) => h("option", { value: s, selected: s === paging.status }, s)),
  );
  const region = h("div", { id: "jobs-region" });
  const message = h("p", { class: "error", role: "alert" });
  const newer = h("button", { type: "button", id: "newer-page", "data-focus-key": "newer" }, "← Newer");
  const older = h("button", { type: "button", id: "older-page", "data-focus-key": "older" }, "Older →");
  const pageNo = h("span", { class: "muted", "aria-live": "polite" });
  // Only an admin may list another owner's jobs: others are not offered the field. An
  // admin sees every owner's jobs until they name one.
  const owner = ctx.isAdmin ? h("input", { type: "text", id: "owner-filter", value: paging.owner, placeholder: "every owner", spellcheck: "false" }) : null;
  const heading = h("h2", {});
  fill(
    view,
    h("h1", {}, "Recent jobs"),
    findJob(ctx),
    heading,
    h(
      "div",
      { class: "toolbar" },
      owner
        ? h("div", { class: "field" }, h("label", { for: "owner-filter" }, "Owner (empty: every owner)"), owner)
        : null,
      h("div", { class: "field" }, h("label", { for: "status-filter" }, "Status"), status),
      h("button", { type: "button", onclick: () => load() }, "Refresh"),
    ),
    message,
    region,
    h("div", { class: "pager" }, newer, older, pageNo),
  );
  let nextCursor = null;

  async function load() {
    const cursor = paging.cursors[paging.cursors.length - 1];
    const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
    const everyOwner = ctx.isAdmin && !paging.owner;
    if (ctx.isAdmin && paging.owner) query.set("owner", paging.owner);
    if (paging.status) query.set("status", paging.status);
    if (cursor) query.set("cursor", cursor);
    heading.textContent = everyOwner ? "Every owner's jobs" : ctx.isAdmin ? `${paging.owner}'s jobs` : "Your jobs";
    let page;
    try {
      page = await api(`${everyOwner ? "/v1/admin/jobs" : "/v1/jobs"}?${query}`);
      message.textContent = "";
    } catch (error) {
      message.textContent = describe(error);
      return;
    }
    nextCursor = page.next_cursor;
    keepingFocus(region, () => fill(region, jobsTable(page.jobs)));
    newer.disabled = paging.cursors.length < 2;
    older.disabled = !nextCursor;
    pageNo.textContent = `Page ${paging.cursors.length}`;
  }

  owner?.addEventListener("change", () => {
    paging.owner = owner.value.trim();
    paging.cursors = [null];
    load();
  });
  status.addEventListener("change", () => {
    paging.status = status.value;
    paging.cursors = [null];
    load();
  });
  older.addEventListener("click", () => {
    if (!nextCursor) return;
    paging.cursors.push(nextCursor);
    load();
  });
  newer.addEventListener("click", () => {
    if (paging.cursors.length < 2) return;
    paging.cursors.pop();
    load();
  });
  await load();
  return every(REFRESH_MS, load);
}

/** The "Find a job" forms: open a job by id, or look one up by owner + Idempotency-Key. */
function findJob(ctx) {
  const jobId = h("input", { type: "text", id: "find-job-id", class: "mono", spellcheck: "false", autocomplete: "off", required: true });
  const byId = h(
    "form",
    { class: "toolbar", id: "find-by-id", novalidate: true },
    h("div", { class: "field grow" }, h("label", { for: "find-job-id" }, "Job id"), jobId),
    h("button", { type: "submit" }, "Open job"),
  );
  byId.addEventListener("submit", (event) => {
    event.preventDefault();
    const id = jobId.value.trim();
    if (id) location.hash = `#/jobs/${encodeURIComponent(id)}`;
  });
  // An owner looks up its own keys only: the field is shown, fixed to the caller.
  const owner = h("input", { type: "text", id: "find-owner", value: ctx.who.owner, spellcheck: "false", autocomplete: "off", readonly: !ctx.isAdmin, "aria-describedby": "find-owner-hint" });
  const key = h("input", { type: "text", id: "find-key", class: "mono", spellcheck: "false", autocomplete: "off", "aria-describedby": "find-key-hint" });
  const found = h("div", { id: "find-result", role: "status" });
  const byKey = h(
    "form",
    { class: "toolbar", id: "find-by-key", novalidate: true },
    h("div", { class: "field" }, h("label", { for: "find-owner" }, "Owner"), owner),
    h("div", { class: "field grow" }, h("label", { for: "find-key" }, "Idempotency-Key"), key),
    h("button", { type: "submit" }, "Find by key"),
  );
  byKey.addEventListener("submit", async (event) => {
    event.preventDefault();
    const who = owner.value.trim() || ctx.who.owner;
    const wanted = key.value.trim();
    if (!wanted) {
      fill(found, h("p", { class: "error" }, "Enter the Idempotency-Key."));
      key.focus();
      return;
    }
    try {
      const page = await api(`/v1/jobs?${new URLSearchParams({ owner: who, idempotency_key: wanted })}`);
      fill(found, page.jobs.length ? jobsTable(page.jobs, "find-table") : h("p", { class: "notice" }, `No job of ${who} has the Idempotency-Key ${wanted}.`));
    } catch (error) {
      fill(found, h("p", { class: "error" }, describe(error)));
    }
  });
  return h(
    "section",
    { class: "find", "aria-labelledby": "find-heading" },
    h("h2", { id: "find-heading" }, "Find a job"),
    byId,
    byKey,
    h(
      "p",
      { class: "hint" },
      h("span", { id: "find-owner-hint" }, ctx.isAdmin ? "Any owner (admin). " : "Your own jobs only. "),
      h("span", { id: "find-key-hint" }, 'The key as the client sent it, without the quotes of "…".'),
    ),
    found,
  );
}

function jobsTable(jobs, id = "jobs-table") {
  if (!jobs.length) return h("p", { class: "notice" }, "No jobs here.");
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: "cards", id },
      h("thead", {}, h("tr", {}, ["Job", "Owner", "Idempotency-Key", "Status", "Contract", "Provider", "Attempts", "Created", "Updated"].map((c) => h("th", { scope: "col" }, c)))),
      h(
        "tbody",
        {},
        jobs.map((job) =>
          h(
            "tr",
            { "data-job": job.id },
            td("Job", h("a", { href: `#/jobs/${encodeURIComponent(job.id)}`, class: "mono id", "data-focus-key": `${id}-${job.id}` }, job.id)),
            td("Owner", h("span", { class: "breakable" }, job.owner)),
            td("Idempotency-Key", h("span", { class: "mono breakable" }, job.idempotency_key)),
            // A queued job that waits for its provider's capacity says for whom and until when.
            td("Status", badge(job.status), job.waiting ? [" · ", h("span", { class: "waiting-note" }, waitingLine(job.waiting))] : null),
            td("Contract", job.contract),
            td("Provider", job.provider),
            td("Attempts", String(job.attempts.length)),
            td("Created", stamp(job.created_at)),
            td("Updated", stamp(job.updated_at)),
          ),
        ),
      ),
    ),
  );
}
