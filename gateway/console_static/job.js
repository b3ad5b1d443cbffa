// One job: its facts, the attempts as lanes on a timeline, the result, replays and
// conflicts, and the audit trail. Follows the job while it can still change. A job that
// waits for its provider's capacity says why and until when; its deadline is a fact.

import { api, describe } from "./api.js";
import { clock, errorWords, waitCount, waitingEventWords, whyWaiting } from "./capacity.js";
import { age, badge, every, fill, h, json, spacedJSON, stamp, td, when } from "./dom.js";
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
    status.textContent = FINAL.has(job.status) ? "" : `Following this job (${following(job)}); updates every ${REFRESH_MS / 1000} s.`;
    return FINAL.has(job.status);
  }

  const done = await load();
  if (done) return null;
  const stop = every(REFRESH_MS, async () => {
    if (await load()) stop();
  });
  return stop;
}

/** The status line of a job still followed: "status queued, waiting until 12:00:05Z (in 25s)". */
function following(job) {
  const w = job.waiting;
  return w ? `status ${job.status}, waiting for ${w.provider} until ${clock(w.until)}, ${age(w.until)}` : `status ${job.status}`;
}

/** Why the job waits and until when: "rate limited by sim-openai; attempt 1 is not sent again before 12:00:05Z (1 wait)". */
function waitingFact(job, numberOf) {
  const w = job.waiting;
  return [
    badge("waiting", "waiting"),
    " ",
    h("span", { class: "why" }, whyWaiting(w.reason, w.provider)),
    `; attempt ${numberOf.get(w.attempt_id) ?? "?"} is not sent again before `,
    h("span", { class: "until" }, clock(w.until)),
    ` (${waitCount(w.waits)})`,
  ];
}

/** The job's deadline: nothing is sent for it after then. */
function deadlineFact(job) {
  if (!job.deadline_at) return "– (a job from before deadlines)";
  if (FINAL.has(job.status)) return when(job.deadline_at);
  return `${when(job.deadline_at)} (${Date.parse(job.deadline_at) > Date.now() ? "nothing is sent for it after then" : "passed"})`;
}

/** An error as JSON, with the words for it first when onejob knows them. */
function errorCell(error, provider, deadlineAt) {
  if (!error) return "–";
  const said = errorWords(error, provider, deadlineAt);
  return [said ? [h("span", { class: "error-words" }, said), h("br")] : null, h("code", {}, spacedJSON(error))];
}

/** An audit event's detail: in words for the capacity events, then as JSON. */
function eventDetail(e, attempt, deadlineAt) {
  const d = e.detail || {};
  let said = null;
  if (e.kind === "attempt_waiting") said = waitingEventWords(d, attempt && attempt.provider);
  else if (e.kind === "attempt_cancelled" && d.why === "superseded") said = "superseded by a manual attempt";
  else if (d.reason === "job_deadline") said = errorWords(d, attempt && attempt.provider, deadlineAt);
  const raw = Object.keys(d).length ? h("code", {}, spacedJSON(d)) : null;
  if (!said) return raw || "–";
  return [h("span", { class: "event-words" }, said), raw ? [h("br"), raw] : null];
}

function jobBody(job, events, width) {
  const replays = events.filter((e) => e.kind === "replayed");
  const conflicts = events.filter((e) => e.kind === "conflict");
  const numberOf = new Map(job.attempts.map((a) => [a.id, a.number]));
  const attemptOf = new Map(job.attempts.map((a) => [a.id, a]));
  const deadlineError = job.error && job.error.reason === "job_deadline" ? errorWords(job.error, job.provider, job.deadline_at) : null;
  return [
    h(
      "dl",
      { class: "facts", id: "job-facts" },
      h("dt", {}, "Status"), h("dd", { id: "job-status" }, badge(job.status)),
      job.waiting ? [h("dt", {}, "Waiting"), h("dd", { id: "job-waiting" }, waitingFact(job, numberOf))] : null,
      h("dt", {}, "Deadline"), h("dd", { id: "job-deadline" }, deadlineFact(job)),
      h("dt", {}, "Contract"), h("dd", {}, job.contract),
      h("dt", {}, "Primary"), h("dd", {}, job.provider),
      h("dt", {}, "Owner"), h("dd", {}, job.owner),
      h("dt", {}, "Idempotency-Key"), h("dd", { class: "mono" }, job.idempotency_key),
      // The trace it was created in: search a tracing backend for this id (docs/telemetry.md).
      h("dt", {}, "Trace"), h("dd", { class: "mono", id: "job-trace", title: job.trace ? job.trace.traceparent : "" }, job.trace ? job.trace.trace_id : "–"),
      h("dt", {}, "Version"), h("dd", {}, String(job.version)),
      h("dt", {}, "Completed by"), h("dd", { class: job.completed_by ? "mono id" : "mono" }, job.completed_by || "–"),
      h("dt", {}, "Created"), h("dd", {}, stamp(job.created_at)),
      h("dt", {}, "Updated"), h("dd", {}, stamp(job.updated_at)),
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
        h("thead", {}, h("tr", {}, ["#", "Provider", "Reason", "State", "Waits", "Started", "Finished", "Error"].map((c) => h("th", { scope: "col" }, c)))),
        h(
          "tbody",
          {},
          job.attempts.map((a) =>
            h(
              "tr",
              { "data-attempt": a.id, "data-state": a.state },
              td("#", String(a.number)),
              td("Provider", a.provider),
              td("Reason", a.reason),
              td("State", badge(a.state), a.state === "waiting" && a.ready_at ? [" ", h("span", { class: "until" }, `until ${clock(a.ready_at)}`)] : null),
              td("Waits", a.waits ? String(a.waits) : "–"),
              td("Started", stamp(a.started_at)),
              td("Finished", stamp(a.finished_at)),
              td("Error", errorCell(a.error, a.provider, job.deadline_at)),
            ),
          ),
        ),
      ),
    ),
    h("h2", {}, "Result"),
    job.result !== null
      ? json(job.result)
      : job.error
        ? [deadlineError ? h("p", { class: "error-words", id: "job-error-words" }, deadlineError) : null, h("p", {}, "No result; the job's error:"), json(job.error)]
        : h("p", { class: "muted" }, job.waiting ? "No result yet: the job waits for capacity." : "No result yet."),
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
              td("At", stamp(e.at)),
              td("Event", e.kind),
              td("Attempt", e.attempt_id ? `#${numberOf.get(e.attempt_id) ?? "?"}` : "–"),
              td("Detail", eventDetail(e, attemptOf.get(e.attempt_id), job.deadline_at)),
            ),
          ),
        ),
      ),
    ),
  ];
}
