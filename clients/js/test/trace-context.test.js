// The client carries the caller's trace context: an explicit traceparent on the creation
// (every try the same), or the client's traceContext() before each request.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Intention, OnejobClient } from "../src/index.js";

const GIVEN = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const JOB = {
  id: "job_1", owner: "alice", idempotency_key: "k", contract: "c@1", provider: "p",
  status: "succeeded", version: 2, completed_by: "att_1", result: {}, error: null,
  created_at: "2026-01-01T00:00:00.000Z", updated_at: "2026-01-01T00:00:01.000Z",
  trace: { traceparent: GIVEN, trace_id: GIVEN.slice(3, 35), tracestate: null }, attempts: [],
};

function gateway() {
  const seen = [];
  const fetch = async (url, init) => {
    seen.push(init.headers);
    if (seen.length === 1) return new Response("{}", { status: 503, headers: { "retry-after": "0" } });
    return new Response(JSON.stringify(JOB), { status: 201, headers: { "content-type": "application/json" } });
  };
  return { seen, fetch };
}

const intention = () => new Intention({ contract: "c@1", input: { n: 1 }, key: "k-1" });
const noSleep = async () => {};

test("an explicit traceparent goes with every try of the creation", async () => {
  const { seen, fetch } = gateway();
  const client = new OnejobClient({ fetch, sleep: noSleep });
  const created = await client.createJob(intention(), { traceparent: GIVEN, tracestate: "v=1" });
  assert.deepEqual(seen.map((h) => [h.traceparent, h.tracestate]), [[GIVEN, "v=1"], [GIVEN, "v=1"]]);
  assert.equal(created.job.trace.trace_id, GIVEN.slice(3, 35));
});

test("traceContext() is asked before each request; an explicit one wins", async () => {
  const { seen, fetch } = gateway();
  let n = 0;
  const traceContext = () => ({ traceparent: `00-${"a".repeat(32)}-${String(++n).padStart(16, "0")}-01` });
  const client = new OnejobClient({ fetch, sleep: noSleep, traceContext });
  await client.run(intention());
  assert.deepEqual(seen.map((h) => h.traceparent.slice(36, 52)), ["0000000000000001", "0000000000000002"]);
  const other = gateway();
  const explicit = new OnejobClient({ fetch: other.fetch, sleep: noSleep, traceContext });
  await explicit.createJob(intention(), { traceparent: GIVEN });
  assert.deepEqual(other.seen.map((h) => h.traceparent), [GIVEN, GIVEN]);
});

test("without either, no trace header is sent", async () => {
  const { seen, fetch } = gateway();
  await new OnejobClient({ fetch, sleep: noSleep }).createJob(intention());
  assert.ok(seen.every((h) => !("traceparent" in h)));
});
