// Waiting on a job's event stream, against a stub gateway of our own on a real socket.
//
// The stub serves GET /v1/jobs/job_1/events as text/event-stream, the way the gateway
// will (issue 39): events with ids, comments as heartbeats. Each connection does what the
// test scripts: send events, then drop (a TCP reset), close, or stay open. The client must
// resume with Last-Event-ID and return as soon as an event says the job settled.

import assert from "node:assert/strict";
import http from "node:http";
import { afterEach, test } from "node:test";

import { OnejobClient } from "../src/index.js";

const JOB_ID = "job_1";

function job(status) {
  return {
    id: JOB_ID,
    owner: "alice",
    idempotency_key: "k",
    contract: "ticket-triage@1",
    provider: "sim-openai",
    status,
    version: status === "succeeded" ? 2 : 1,
    completed_by: null,
    result: status === "succeeded" ? { category: "billing" } : null,
    error: null,
    created_at: "2026-12-04T00:00:00.000Z",
    updated_at: "2026-12-04T00:00:00.000Z",
    attempts: [],
  };
}

function event(id, kind) {
  return `id: ${id}\nevent: ${kind}\ndata: ${JSON.stringify({ id, kind, detail: {} })}\n\n`;
}

const servers = [];
afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((resolve) => s.close(resolve));
  }
});

async function stub(...plans) {
  const state = { status: "running", lastEventIds: [], jobReads: 0 };
  const server = http.createServer((req, res) => {
    if (req.url === `/v1/jobs/${JOB_ID}/events`) {
      assert.equal(req.headers.accept, "text/event-stream");
      assert.equal(req.headers.authorization, "Bearer oj_key");
      state.lastEventIds.push(req.headers["last-event-id"] ?? null);
      plans.shift()(req, res, state);
    } else if (req.url === `/v1/jobs/${JOB_ID}`) {
      state.jobReads += 1;
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify(job(state.status)));
    } else if (req.url === "/json-events") {
      res.end();
    } else {
      res.writeHead(404);
      res.end();
    }
  });
  servers.push(server);
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  state.url = `http://127.0.0.1:${server.address().port}`;
  return state;
}

function startStream(res) {
  res.writeHead(200, { "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache" });
}

const eventsThenDrop = (req, res) => {
  startStream(res);
  res.write("retry: 50\n\n" + event(1, "job_created") + ": heartbeat\n\n" + event(2, "attempt_running"));
  setTimeout(() => req.socket.resetAndDestroy(), 50);
};

const eventsThenClose = (req, res) => {
  startStream(res);
  res.end(event(1, "job_created") + event(2, "attempt_running"));
};

const decidedAndOpen = (req, res, state) => {
  state.status = "succeeded";
  startStream(res);
  res.write(event(3, "attempt_succeeded") + 'event: status\ndata: {"status": "succeeded"}\n\n');
};

async function waitOn(state) {
  const onejob = new OnejobClient({ baseUrl: state.url, apiKey: "oj_key" });
  const seen = [];
  const started = Date.now();
  const done = await onejob.waitForJob(JOB_ID, { timeoutMs: 10_000, onEvent: (e) => seen.push(e) });
  assert.equal(onejob.streams, true);
  return { done, seen, took: Date.now() - started };
}

test("a dropped stream is resumed after the last event id", async () => {
  const state = await stub(eventsThenDrop, decidedAndOpen);
  const { done, seen, took } = await waitOn(state);
  assert.equal(done.status, "succeeded");
  assert.deepEqual(state.lastEventIds, [null, "2"]);
  assert.deepEqual(
    seen.slice(0, 3).map((e) => [e.id, e.event]),
    [
      ["1", "job_created"],
      ["2", "attempt_running"],
      ["3", "attempt_succeeded"],
    ],
  );
  // Back within the stream's own retry (50 ms); out as soon as the deciding event came.
  assert.ok(took < 1000, `took ${took} ms`);
});

test("a stream closed before the job settled is reopened", async () => {
  const state = await stub(eventsThenClose, decidedAndOpen);
  const { done } = await waitOn(state);
  assert.equal(done.status, "succeeded");
  assert.deepEqual(state.lastEventIds, [null, "2"]);
});

test("without an event stream the wait polls with Prefer: wait", async () => {
  let polls = 0;
  const prefers = [];
  const server = http.createServer((req, res) => {
    if (req.url.endsWith("/events")) {
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ job_id: JOB_ID, events: [] }));
      return;
    }
    polls += 1;
    prefers.push(req.headers.prefer);
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify(job(polls < 2 ? "running" : "unknown")));
  });
  servers.push(server);
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const onejob = new OnejobClient({ baseUrl: `http://127.0.0.1:${server.address().port}` });
  const done = await onejob.waitForJob(JOB_ID, { timeoutMs: 30_000, pollWaitSeconds: 5 });
  assert.equal(done.status, "unknown");
  assert.equal(onejob.streams, false);
  assert.deepEqual(prefers, ["wait=5", "wait=5"]);
});

test("events that never settle a job do not read it; others, and unknown kinds, do", async () => {
  const { mayHaveSettled } = await import("../src/index.js");
  const audit = (kind) => ({ event: kind, data: JSON.stringify({ id: 1, kind, detail: {} }), id: "1", retry: null });
  for (const kind of ["job_created", "attempt_created", "attempt_running", "attempt_waiting", "replayed", "attempt_refused", "failover_skipped"]) {
    assert.equal(mayHaveSettled(audit(kind)), false, kind);
  }
  for (const kind of ["attempt_unknown", "attempt_succeeded", "job_failed", "job_cancelled", "a_new_kind"]) {
    assert.equal(mayHaveSettled(audit(kind)), true, kind);
  }
  const status = (data) => ({ event: "status", data: JSON.stringify(data), id: "", retry: null });
  assert.equal(mayHaveSettled(status({ status: "running" })), false);
  assert.equal(mayHaveSettled(status({ status: "unknown" })), true);
  assert.equal(mayHaveSettled(status({ job: { status: "succeeded" } })), true);
});

const jobEvent = (status) => `event: job\ndata: ${JSON.stringify(job(status))}\n\n`;

const unknownThenResolved = (req, res, state) => {
  startStream(res);
  res.write(event(1, "attempt_running") + jobEvent("running"));
  setTimeout(() => {
    state.status = "unknown";
    res.write(event(2, "attempt_unknown") + jobEvent("unknown"));
  }, 100);
  setTimeout(() => {
    state.status = "succeeded";
    res.write(event(3, "attempt_resolved") + jobEvent("succeeded"));
  }, 500);
};

test("the job comes with the stream, and until: isDecided follows an unknown job", async () => {
  const { isDecided } = await import("../src/index.js");
  const state = await stub(unknownThenResolved, unknownThenResolved);
  const onejob = new OnejobClient({ baseUrl: state.url, apiKey: "oj_key" });
  const statuses = [];
  const first = await onejob.waitForJob(JOB_ID, { timeoutMs: 10_000, onJob: (j) => statuses.push(j.status) });
  const decided = await onejob.waitForJob(JOB_ID, { timeoutMs: 10_000, until: isDecided });
  assert.equal(first.status, "unknown"); // settled: the default stops here
  assert.deepEqual(statuses, ["running", "unknown"]);
  assert.equal(decided.status, "succeeded"); // followed through unknown
  assert.equal(state.jobReads, 0); // every job came with the stream: none was read
});

test("polling an unknown job until it is decided does not ask in a tight loop", async () => {
  const { isDecided } = await import("../src/index.js");
  let polls = 0;
  const server = http.createServer((req, res) => {
    if (req.url.endsWith("/events")) {
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end("{}");
      return;
    }
    polls += 1;
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify(job(polls < 3 ? "unknown" : "succeeded")));
  });
  servers.push(server);
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const slept = [];
  const onejob = new OnejobClient({
    baseUrl: `http://127.0.0.1:${server.address().port}`,
    sleep: async (ms) => slept.push(ms),
  });
  const done = await onejob.waitForJob(JOB_ID, { timeoutMs: 30_000, until: isDecided });
  assert.equal(done.status, "succeeded");
  assert.equal(polls, 3);
  assert.deepEqual(slept, [1000, 1000]);
});

const providerSaysNotNow = (req, res, state) => {
  // Audit events only (no `event: job`): the attempt waits, then runs and succeeds.
  startStream(res);
  res.write(event(1, "attempt_running") + event(2, "attempt_waiting"));
  setTimeout(() => {
    state.status = "succeeded";
    res.write(event(3, "attempt_running") + event(4, "attempt_succeeded"));
  }, 200);
};

test("a provider saying not now does not wake the waiter to read the job", async () => {
  const state = await stub(providerSaysNotNow);
  const { done, seen } = await waitOn(state);
  assert.equal(done.status, "succeeded");
  assert.deepEqual(
    seen.map((e) => e.event),
    ["attempt_running", "attempt_waiting", "attempt_running", "attempt_succeeded"],
  );
  assert.equal(state.jobReads, 1); // after attempt_succeeded only, not after attempt_waiting
});
