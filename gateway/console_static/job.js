// One job: its facts, the attempts as lanes on a timeline, the result, replays and
// conflicts, and the audit trail. Follows the job while it can still change.

import { api, describe } from "./api.js";
import { badge, every, fill, h, json, td, when } from "./dom.js";
import { renderTimeline } from "./timeline.js";

const REFRESH_MS = 1500;
const FINAL = new Set(["succeeded", "failed", "cancelled"]);

export async function renderJob(view, ctx, jobId) {
  const region = h("div", { id: "job-region" });
  const status = h("p", { class: "muted", role: "status", id: "job-refresh" });
  fill(view, h("p", {}, h("a", { href: "#/jobs" }, "← Recent jobs")), h("h1", {}, "Job ", h("span", { class: "mono" }, jobId)), status, region);
  // An admin reads any owner's job (the job of an unknown attempt); others only their own.
  const path = `${ctx.isAdmin ? "/v1/admin/jobs" : "/v1/jobs"}/${encodeURIComponent(jobId)}`;
  let lastSeen = "";

  async function load() {
    let job, events;
    try {
      [job, { events }] = await Promise.all([api(path), api(`${path}/events`)]);
    } catch (error) {
      fill(region, h("p", { class: "error", role: "alert" }, describe(error)));
      return false;
    }
    const stamp = `${job.version}/${job.status}/${events.length}`;
    if (stamp !== lastSeen) {
      lastSeen = stamp;
      fill(region, jobBody(job, events, region.clientWidth - 2));
    }
    status.textContent = FINAL.has(job.status) ? "" : `Following this job (status ${job.status}); updates every ${REFRESH_MS / 1000} s.`;
    return FINAL.has(job.status);
  }

  const done = await load();
  if (done) return null;
  const stop = every(REFRESH_MS, async () => {
    if (await load()) stop();
  });
  return stop;
}

function jobBody(job, events, width) {
  const replays = events.filter((e) => e.kind === "replayed");
  const conflicts = events.filter((e) => e.kind === "conflict");
  const numberOf = new Map(job.attempts.map((a) => [a.id, a.number]));
  return [
    h(
      "dl",
      { class: "facts", id: "job-facts" },
      h("dt", {}, "Status"), h("dd", { id: "job-status" }, badge(job.status)),
      h("dt", {}, "Contract"), h("dd", {}, job.contract),
      h("dt", {}, "Primary"), h("dd", {}, job.provider),
      h("dt", {}, "Owner"), h("dd", {}, job.owner),
      h("dt", {}, "Idempotency-Key"), h("dd", { class: "mono" }, job.idempotency_key),
      h("dt", {}, "Version"), h("dd", {}, String(job.version)),
      h("dt", {}, "Completed by"), h("dd", { class: "mono" }, job.completed_by || "–"),
      h("dt", {}, "Created"), h("dd", {}, when(job.created_at)),
      h("dt", {}, "Updated"), h("dd", {}, when(job.updated_at)),
    ),
    h("h2", {}, "Timeline"),
    h("div", { class: "timeline-wrap" }, renderTimeline(job, events, width)),
    h("h2", {}, "Attempts"),
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { class: "cards", id: "attempts-table" },
        h("thead", {}, h("tr", {}, ["#", "Provider", "Reason", "State", "Started", "Finished", "Error"].map((c) => h("th", { scope: "col" }, c)))),
        h(
          "tbody",
          {},
          job.attempts.map((a) =>
            h(
              "tr",
              { "data-attempt": a.id },
              td("#", String(a.number)),
              td("Provider", a.provider),
              td("Reason", a.reason),
              td("State", badge(a.state)),
              td("Started", when(a.started_at)),
              td("Finished", when(a.finished_at)),
              td("Error", a.error ? h("code", {}, JSON.stringify(a.error)) : "–"),
            ),
          ),
        ),
      ),
    ),
    h("h2", {}, "Result"),
    job.result !== null ? json(job.result) : job.error ? [h("p", {}, "No result; the job's error:"), json(job.error)] : h("p", { class: "muted" }, "No result yet."),
    h("h2", {}, "Replays and conflicts"),
    replays.length || conflicts.length
      ? h(
          "ul",
          { id: "replays" },
          replays.map((e) => h("li", {}, `${when(e.at)}: replayed (same key, same request: the client got this job back)`)),
          conflicts.map((e) => h("li", {}, `${when(e.at)}: conflict (same key, different request: refused with 409, job unchanged)`)),
        )
      : h("p", { class: "muted", id: "replays" }, "None: the key was used once."),
    h("h2", {}, "Audit events"),
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { class: "cards", id: "events-table" },
        h("thead", {}, h("tr", {}, ["At", "Event", "Attempt", "Detail"].map((c) => h("th", { scope: "col" }, c)))),
        h(
          "tbody",
          {},
          events.map((e) =>
            h(
              "tr",
              { "data-kind": e.kind },
              td("At", when(e.at)),
              td("Event", e.kind),
              td("Attempt", e.attempt_id ? `#${numberOf.get(e.attempt_id) ?? "?"}` : "–"),
              td("Detail", Object.keys(e.detail || {}).length ? h("code", {}, JSON.stringify(e.detail)) : "–"),
            ),
          ),
        ),
      ),
    ),
  ];
}
