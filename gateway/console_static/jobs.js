// Recent jobs: the caller's jobs, newest first, with a status filter and cursor paging.

import { api, describe } from "./api.js";
import { badge, every, fill, h, keepingFocus, td, when } from "./dom.js";

const STATUSES = ["queued", "running", "unknown", "succeeded", "failed", "cancelled"];
const PAGE_SIZE = 20;
const REFRESH_MS = 3000;

// Kept across visits to the view, so "back" from a job returns to the same page.
const paging = { status: "", cursors: [null] };

export async function renderJobs(view) {
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
  fill(
    view,
    h("h1", {}, "Recent jobs"),
    h(
      "div",
      { class: "toolbar" },
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
    if (paging.status) query.set("status", paging.status);
    if (cursor) query.set("cursor", cursor);
    let page;
    try {
      page = await api(`/v1/jobs?${query}`);
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

function jobsTable(jobs) {
  if (!jobs.length) return h("p", { class: "notice" }, "No jobs here.");
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: "cards", id: "jobs-table" },
      h("thead", {}, h("tr", {}, ["Job", "Status", "Contract", "Provider", "Attempts", "Created", "Updated"].map((c) => h("th", { scope: "col" }, c)))),
      h(
        "tbody",
        {},
        jobs.map((job) =>
          h(
            "tr",
            { "data-job": job.id },
            td("Job", h("a", { href: `#/jobs/${encodeURIComponent(job.id)}`, class: "mono", "data-focus-key": `job-${job.id}` }, job.id)),
            td("Status", badge(job.status)),
            td("Contract", job.contract),
            td("Provider", job.provider),
            td("Attempts", String(job.attempts.length)),
            td("Created", when(job.created_at)),
            td("Updated", when(job.updated_at)),
          ),
        ),
      ),
    ),
  );
}
