// The seed's two buttons, done right: one intention, one key, one job.
//
// The intention (and its Idempotency-Key) is made when the page is shown and kept in
// sessionStorage. "Triage this ticket" sends it; a double click, the client's own retries
// and a reload all send the same key, so onejob gives back the same job. "Try the
// fallback" asks for a manual attempt; while an attempt is still in progress (running, or
// unknown after a timeout) onejob refuses, and the page says to wait instead of failing.

import {
  Intention,
  JobClosed,
  OnejobClient,
  Unavailable,
  blockingAttempt,
  isDecided,
  rememberIntention,
} from "./onejob-client/index.js";

const main = document.querySelector("main");
const CONTRACT = main.dataset.contract;
const FALLBACK = main.dataset.fallback;
const TICKET = JSON.parse(document.getElementById("ticket-input").textContent);
const FOLLOW_MS = 3_600_000; // how long the page follows a job: an hour

const $ = (id) => document.getElementById(id);
const triageButton = $("triage");
const fallbackButton = $("fallback");

const client = new OnejobClient({
  baseUrl: "", // this page's own server forwards /v1 to onejob and adds the API key
  policy: { deadlineMs: 120_000 },
  onRetry: ({ status, delayMs, tries }) => {
    const why = status === null ? "No answer from onejob" : `onejob answered ${status}`;
    const wait = (delayMs / 1000).toFixed(1);
    say(`${why}. Trying again in ${wait} s with the same key: it cannot make a second job.`, "retry");
    note(`${why} (try ${tries}); retrying in ${wait} s with the same key`);
  },
});

// Made when the page is shown, kept across reloads of this tab.
const slot = rememberIntention(`triage:${TICKET.ticket_id}`, () =>
  Intention.create(CONTRACT, TICKET),
);
$("intention-key").textContent = slot.intention.key;

let current = null; // the job as last seen
let following = null; // the one wait in progress
// Jobs whose creation the log has told: a second click's replay can come back before the
// first click's 201, and the log tells the creation first all the same.
const told = new Set();

function say(text, tone = "info") {
  const message = $("message");
  message.textContent = text;
  message.dataset.tone = tone;
}

function note(text) {
  const item = document.createElement("li");
  const time = document.createElement("time");
  time.textContent = new Date().toLocaleTimeString([], { hour12: false });
  item.append(time, ` ${text}`);
  $("log").append(item);
}

function setStatus(status) {
  const badge = $("job-status");
  badge.textContent = status;
  badge.dataset.status = status.replace(/\s+/g, "-");
}

function describe(job) {
  const blocking = blockingAttempt(job);
  switch (job.status) {
    case "queued":
      return ["Queued: the first attempt is about to start.", "info"];
    case "running":
      return [`Attempt ${blocking?.number ?? ""} is running at ${blocking?.provider ?? job.provider}.`, "info"];
    case "unknown":
      return [
        `Attempt ${blocking?.number} timed out at ${blocking?.provider}: its outcome is unknown. ` +
          "It may still finish there, so onejob starts no other attempt until an operator " +
          "resolves it (the console's Unknown attempts). This page shows what they decide.",
        "wait",
      ];
    case "succeeded":
      return [`Triaged: ${job.result.category}, ${job.result.priority} priority.`, "done"];
    case "failed":
      return ["No attempt succeeded. The fallback may try again.", "error"];
    case "cancelled":
      return ["The job was cancelled.", "error"];
    default:
      return [job.status, "info"];
  }
}

function render(job) {
  const changed = current?.status !== job.status || current?.attempts.length !== job.attempts.length;
  current = job;
  setStatus(job.status);
  $("job-id").textContent = job.id;
  const list = $("attempts");
  list.replaceChildren(
    ...job.attempts.map((a) => {
      const item = document.createElement("li");
      item.dataset.state = a.state;
      const state = document.createElement("span");
      state.className = "state";
      state.textContent = a.state;
      item.append(`Attempt ${a.number} · ${a.provider} · ${a.reason} `, state);
      return item;
    }),
  );
  const result = $("result");
  result.hidden = job.status !== "succeeded";
  if (job.status === "succeeded") {
    $("result-category").textContent = job.result.category;
    $("result-priority").textContent = job.result.priority;
    $("result-human").textContent = job.result.needs_human ? "yes" : "no";
    $("result-summary").textContent = job.result.summary;
  }
  fallbackButton.disabled = job.status === "succeeded" || job.status === "cancelled";
  if (changed) {
    const [text, tone] = describe(job);
    say(text, tone);
    note(`Job ${job.status}${job.attempts.length > 1 ? ` (${job.attempts.length} attempts)` : ""}`);
  }
}

function fail(error) {
  if (error instanceof Unavailable) {
    say(`onejob did not answer after ${error.tries} tries. Press again later: the same key is kept.`, "error");
  } else {
    say(error.message, "error");
  }
  note(`Error: ${error.message}`);
}

function follow(jobId) {
  following ??= (async () => {
    try {
      // Follow the job until it is decided: through `unknown` too, which an operator may
      // resolve while the page is open. On the gateway's event stream each change arrives
      // as it commits; without one, short polls show each status as it comes.
      await client.waitForJob(jobId, {
        timeoutMs: FOLLOW_MS,
        until: isDecided,
        pollWaitSeconds: 2,
        onJob: render,
        // Audit events; the job itself (event: job) is shown by render, through onJob.
        onEvent: (event) => {
          if (event.event !== "job") note(`Event ${event.event} (#${event.id})`);
        },
      });
    } catch (error) {
      fail(error);
    } finally {
      following = null;
    }
  })();
  return following;
}

async function triage() {
  if (!current) {
    setStatus("sending");
    say("Sending…");
  }
  slot.markSent(); // before the request leaves: a reload from now on resumes it
  try {
    const created = await client.createJob(slot.intention);
    slot.setJob(created.job.id);
    if (!told.has(created.job.id)) {
      told.add(created.job.id);
      // A replay that comes first: an earlier send made the job; its own answer is late.
      note(`Created job ${created.job.id}${created.replayed ? " (by an earlier send)" : ""}`);
    }
    if (created.replayed) {
      note(`Sent again: the same job ${created.job.id} came back (Idempotent-Replayed)`);
    }
    render(created.job);
    follow(created.job.id);
  } catch (error) {
    fail(error);
  }
}

async function tryFallback() {
  if (!current) return;
  note(`Asked for the fallback (${FALLBACK})`);
  try {
    const outcome = await client.fallback(current.id, FALLBACK);
    if (outcome.kind === "still-in-progress") {
      const attempt = current.attempts.find((a) => a.id === outcome.attemptId);
      const which = attempt ? `Attempt ${attempt.number} (${attempt.provider})` : "An attempt";
      // An unknown attempt does not end by waiting: an operator resolves it.
      const next =
        outcome.attemptState === "unknown"
          ? "Its outcome waits for an operator to resolve it (the console's Unknown attempts); " +
            "this page shows what they decide."
          : "Please wait: it will finish, or time out, shortly.";
      say(
        `Still in progress: ${which} is ${outcome.attemptState}. The fallback was not called, ` +
          `because a second call could triage this ticket twice. ${next}`,
        "wait",
      );
      note(`Fallback refused: ${outcome.attemptId} is ${outcome.attemptState}; nothing was sent`);
      return;
    }
    note(`Fallback attempt ${outcome.attemptId} accepted`);
    render(outcome.job);
    follow(outcome.job.id);
  } catch (error) {
    if (error instanceof JobClosed) {
      say("This ticket is already triaged: there is nothing to fall back from.", "done");
      note("Fallback refused: the job is already decided");
    } else {
      fail(error);
    }
  }
}

triageButton.addEventListener("click", triage);
fallbackButton.addEventListener("click", tryFallback);

// A reload: an intention that was sent is resumed, never sent under a new key.
if (slot.jobId) {
  told.add(slot.jobId); // created before the reload: its answer now is a replay
  note(`Page reloaded: following job ${slot.jobId} again`);
  setStatus("sending");
  triage();
} else if (slot.sent) {
  note("Page reloaded while sending: sending the same intention again");
  triage();
}
