// The JS client against a served gateway (`onejob serve` on SQLite with the bundled
// simulator, started from its CLI), through a forwarder that drops connections and
// answers 503: however many tries, one intention makes one job and one provider call.

import assert from "node:assert/strict";
import { after, before, beforeEach, describe, test } from "node:test";

import {
  Intention,
  InvalidInput,
  KeyReused,
  OnejobClient,
  Unavailable,
  isSettled,
  rememberIntention,
} from "../src/index.js";
import { startFaultProxy } from "../testing/fault-proxy.js";
import { CONTRACT, TICKET, startStack } from "../testing/served.js";

const FAST = { deadlineMs: 20_000, initialBackoffMs: 50, maxBackoffMs: 200 };
const FAULTS = ["reset_after", "unavailable", "unavailable", "reset_before"];

class MemoryStorage {
  constructor() {
    this.items = new Map();
  }
  getItem(k) {
    return this.items.get(k) ?? null;
  }
  setItem(k, v) {
    this.items.set(k, String(v));
  }
  removeItem(k) {
    this.items.delete(k);
  }
}

describe("against a served gateway", { timeout: 300_000 }, () => {
  let stack;
  let proxy;
  let before_;

  before(async () => {
    stack = await startStack();
  }, { timeout: 150_000 });

  after(async () => {
    await proxy?.close();
    await stack?.stop();
  });

  beforeEach(async () => {
    await proxy?.close();
    await stack.simReset();
    proxy = await startFaultProxy(stack.gateway);
    before_ = await stack.jobIds();
  });

  async function oneJobOneCall(jobId) {
    const now = await stack.jobIds();
    assert.deepEqual([...now].filter((id) => !before_.has(id)), [jobId]);
    const calls = await stack.simCalls();
    assert.deepEqual(calls.map((c) => c.idempotency_key), [`${jobId}/1`]);
  }

  function sameKeyAndBody(intention, tries) {
    const seen = proxy.requests("POST", "/v1/jobs");
    assert.equal(seen.length, tries);
    assert.deepEqual([...new Set(seen.map((s) => s.key))], [`"${intention.key}"`]);
    assert.deepEqual([...new Set(seen.map((s) => s.body))], [intention.body]);
  }

  test("resets and 503s are retried with one key into one job", async () => {
    proxy.script("POST", "/v1/jobs", ...FAULTS);
    const retries = [];
    const onejob = new OnejobClient({
      baseUrl: proxy.url,
      apiKey: stack.key,
      policy: FAST,
      onRetry: (info) => retries.push(info.status),
    });
    const intention = Intention.create(CONTRACT, TICKET);
    const created = await onejob.createJob(intention);
    const job = await onejob.waitForJob(created.job.id, { timeoutMs: 20_000 });

    assert.equal(created.tries, 5);
    assert.equal(created.replayed, true); // the first try made it; the fifth got it back
    assert.equal(created.status, 200);
    assert.deepEqual(retries, [null, 503, 503, null]);
    assert.equal(job.status, "succeeded");
    sameKeyAndBody(intention, 5);
    assert.deepEqual(
      proxy.requests("POST", "/v1/jobs").map((s) => s.done),
      [...FAULTS, "forwarded"],
    );
    await oneJobOneCall(job.id);
  });

  test("a reload resumes the remembered intention into the same job", async () => {
    const storage = new MemoryStorage();
    const make = () => Intention.create(CONTRACT, TICKET);
    const page = rememberIntention("triage:SUP-42", make, storage);
    page.markSent();
    proxy.script("POST", "/v1/jobs", "reset_after");
    const dies = new OnejobClient({
      baseUrl: proxy.url,
      apiKey: stack.key,
      policy: { deadlineMs: 200, initialBackoffMs: 1000 },
    });
    await assert.rejects(dies.createJob(page.intention), Unavailable); // the page is reloaded here

    const reloaded = rememberIntention("triage:SUP-42", make, storage);
    assert.equal(reloaded.sent, true);
    const onejob = new OnejobClient({ baseUrl: proxy.url, apiKey: stack.key });
    const created = await onejob.createJob(reloaded.intention);
    assert.equal(created.replayed, true);
    const job = await onejob.waitForJob(created.job.id, { timeoutMs: 20_000 });
    sameKeyAndBody(page.intention, 2);
    await oneJobOneCall(job.id);
  });

  test("a different body with the same intention key throws KeyReused", async () => {
    const onejob = new OnejobClient({ baseUrl: stack.gateway, apiKey: stack.key });
    const intention = Intention.create(CONTRACT, TICKET);
    const job = await onejob.run(intention, { timeoutMs: 20_000 });
    const changed = Intention.create(CONTRACT, { ...TICKET, subject: "Charged three times" }, { key: intention.key });
    await assert.rejects(onejob.createJob(changed), (error) => {
      assert.ok(error instanceof KeyReused);
      assert.equal(error.jobId, job.id);
      assert.equal(error.status, 409);
      return true;
    });
    assert.deepEqual(await onejob.getJob(job.id), job); // unchanged
    await oneJobOneCall(job.id);
  });

  test("invalid input is not retried and names the schema errors", async () => {
    const onejob = new OnejobClient({ baseUrl: proxy.url, apiKey: stack.key, policy: FAST });
    await assert.rejects(onejob.createJob(Intention.create(CONTRACT, { ticket_id: "SUP-42" })), (error) => {
      assert.ok(error instanceof InvalidInput);
      assert.ok(error.errors.some((e) => e.includes("'subject' is a required property")));
      return true;
    });
    assert.equal(proxy.requests("POST", "/v1/jobs").length, 1);
  });

  test("the fallback button while the first attempt is unknown says wait", async () => {
    await stack.simScript("sim-openai", { kind: "hang" });
    const onejob = new OnejobClient({ baseUrl: stack.gateway, apiKey: stack.key });
    const job = await onejob.run(Intention.create(CONTRACT, TICKET), { timeoutMs: 20_000 });
    assert.equal(job.status, "unknown");
    assert.equal(onejob.streams, true); // waited on the gateway's event stream
    const outcome = await onejob.fallback(job.id, "sim-anthropic");
    assert.equal(outcome.kind, "still-in-progress");
    assert.equal(outcome.attemptId, job.attempts[0].id);
    assert.equal(outcome.attemptState, "unknown");
    await oneJobOneCall(job.id);
    assert.deepEqual((await stack.simCalls()).map((c) => c.provider), ["sim-openai"]);
  });

  test(
    "the client waits on the gateway's event stream and resumes it after a drop",
    async () => {
      await stack.simScript("sim-openai", { kind: "delay", seconds: 2 });
      const onejob = new OnejobClient({ baseUrl: stack.gateway, apiKey: stack.key });
      const { job } = await onejob.createJob(Intention.create(CONTRACT, TICKET));
      const probe = await fetch(`${stack.gateway}/v1/jobs/${job.id}/events`, {
        headers: { Authorization: `Bearer ${stack.key}`, Accept: "text/event-stream" },
      });
      await probe.body?.cancel();
      assert.match(probe.headers.get("content-type") ?? "", /^text\/event-stream/);
      // Through the forwarder, which cuts the first stream after its first event: the
      // client resumes after the last id it read, and sees every event once.
      const path = `/v1/jobs/${job.id}/events`;
      proxy.script("GET", path, "cut_stream");
      const viaProxy = new OnejobClient({ baseUrl: proxy.url, apiKey: stack.key });
      const seen = [];
      const statuses = [];
      const done = await viaProxy.waitForJob(job.id, {
        timeoutMs: 20_000,
        onEvent: (e) => seen.push(e),
        onJob: (j) => statuses.push(j.status),
      });
      assert.equal(viaProxy.streams, true);
      assert.equal(done.status, "succeeded");
      // a `job` snapshot carries the last event id (no id field of its own): audit events only
      const ids = seen.filter((e) => e.event !== "job").map((e) => e.id).filter(Boolean);
      assert.ok(ids.length > 0 && new Set(ids).size === ids.length);
      const streams = proxy.requests("GET", path);
      assert.deepEqual(
        streams.slice(0, 2).map((s) => s.done),
        ["cut_stream", "forwarded"],
      );
      // Resumed after an event it had read (whatever the first chunk held), none twice.
      assert.equal(streams[0].lastEventId, null);
      assert.ok(ids.includes(streams[1].lastEventId), streams[1].lastEventId);
      // The job came with the stream (event: job), as it changed.
      assert.ok(["queued", "running"].includes(statuses[0]), statuses.join());
      assert.equal(statuses.at(-1), "succeeded");
      await oneJobOneCall(job.id);
    },
  );
  test("deadlineS is the first try's; a retry with another, or none, replays the same job", async () => {
    const onejob = new OnejobClient({ baseUrl: stack.gateway, apiKey: stack.key });
    const intention = Intention.create(CONTRACT, TICKET);
    const first = await onejob.createJob(intention, { deadlineS: 30 });
    const again = await onejob.createJob(intention, { deadlineS: 5 }); // not in the fingerprint
    const plain = await onejob.createJob(intention);
    assert.equal(first.status, 201);
    assert.equal(Date.parse(first.job.deadline_at) - Date.parse(first.job.created_at), 30_000);
    assert.deepEqual([again.replayed, plain.replayed], [true, true]);
    assert.deepEqual([again.job.deadline_at, plain.job.deadline_at], [first.job.deadline_at, first.job.deadline_at]);
    await assert.rejects(
      onejob.createJob(Intention.create(CONTRACT, TICKET), { deadlineS: 601 }), // over the route's 600 s
      InvalidInput,
    );
    const job = await onejob.waitForJob(first.job.id, { timeoutMs: 20_000 });
    assert.equal(job.status, "succeeded");
    await oneJobOneCall(job.id);
  });

  test("a rate-limited job waits, says why, and is sent again under the same key", async () => {
    await stack.simScript("sim-openai", { kind: "status", code: 429, retry_after: 2 });
    const onejob = new OnejobClient({ baseUrl: stack.gateway, apiKey: stack.key });
    const seen = [];
    const kinds = [];
    const job = await onejob.run(Intention.create(CONTRACT, TICKET), {
      timeoutMs: 30_000,
      onJob: (j) => seen.push(j),
      onEvent: (e) => kinds.push(e.event),
    });
    assert.equal(job.status, "succeeded");
    const waited = seen.find((j) => j.waiting);
    assert.ok(waited, seen.map((j) => j.status).join());
    assert.equal(waited.status, "queued");
    assert.equal(isSettled(waited), false);
    assert.equal(waited.waiting.provider, "sim-openai");
    assert.equal(waited.waiting.reason, "rate_limited");
    assert.equal(waited.attempts[0].state, "waiting");
    assert.equal(waited.attempts[0].ready_at, waited.waiting.until);
    assert.ok(kinds.includes("attempt_waiting"), kinds.join());
    assert.equal(job.attempts.length, 1);
    assert.equal(job.attempts[0].waits, 1);
    const calls = await stack.simCalls(job.id);
    assert.deepEqual(calls.map((c) => c.idempotency_key), [`${job.id}/1`, `${job.id}/1`]);
  });
});
