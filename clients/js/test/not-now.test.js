// A provider's "not now" (issue 43), against a scripted fetch: a job that waits says why and
// until when, attempt_waiting never wakes a waiter, a full queue is retried after its
// Retry-After into one job (or ends as QueueFull), deadlineS goes in the body, and a job
// failed by its deadline is told from one a provider failed.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  Intention,
  OnejobClient,
  QueueFull,
  Retrying,
  Unavailable,
  blockingAttempt,
  deadlinePassed,
  failureReason,
  isSettled,
  mayHaveSettled,
} from "../src/index.js";

const INTENTION = Intention.create("ticket-triage@1", { ticket_id: "SUP-42" });

function job(status = "queued", more = {}) {
  return {
    id: "job_1",
    owner: "alice",
    idempotency_key: INTENTION.key,
    contract: "ticket-triage@1",
    provider: "sim-openai",
    status,
    version: 1,
    completed_by: null,
    result: null,
    error: null,
    created_at: "2026-12-04T00:00:00.000Z",
    updated_at: "2026-12-04T00:00:00.000Z",
    deadline_at: "2026-12-04T00:10:00.000Z",
    waiting: null,
    attempts: [],
    ...more,
  };
}

function waitingJob() {
  const until = "2026-12-04T00:00:20.000Z";
  return job("queued", {
    attempts: [
      {
        id: "att_1",
        number: 1,
        provider: "sim-openai",
        reason: "initial",
        state: "waiting",
        error: { reason: "rate_limited", capacity: "rate_limited", retry_after_s: 20 },
        started_at: null,
        finished_at: null,
        ready_at: until,
        waits: 1,
      },
    ],
    waiting: { attempt_id: "att_1", provider: "sim-openai", reason: "rate_limited", until, waits: 1 },
  });
}

const queueFull = () =>
  new Response(
    JSON.stringify({
      type: "urn:onejob:queue-full",
      title: "Queue full",
      status: 503,
      detail: "2 jobs are waiting to be sent (the limit is 1); nothing was created.",
    }),
    { status: 503, headers: { "Content-Type": "application/problem+json", "Retry-After": "5" } },
  );
const created = (body = job()) =>
  new Response(JSON.stringify(body), { status: 201, headers: { "Content-Type": "application/json" } });

/** A client on a scripted fetch; `sent` keeps each request, `slept` each wait (ms). */
function scripted(...answers) {
  const sent = [];
  const slept = [];
  const retried = [];
  const onejob = new OnejobClient({
    baseUrl: "http://onejob.test",
    apiKey: "oj_key",
    fetch: async (url, init) => {
      sent.push({ url, ...init });
      const answer = answers.shift();
      if (!answer) throw new Error("no answer scripted");
      return answer();
    },
    sleep: async (ms) => slept.push(ms),
    onRetry: (info) => retried.push(info),
  });
  return { onejob, sent, slept, retried };
}

test("a job waiting for its provider's capacity reads with why and until when", async () => {
  const { onejob } = scripted(() => new Response(JSON.stringify(waitingJob()), { status: 200 }));
  const read = await onejob.getJob("job_1");
  assert.equal(read.status, "queued");
  assert.equal(isSettled(read), false);
  assert.equal(read.attempts[0].state, "waiting");
  assert.equal(read.attempts[0].ready_at, "2026-12-04T00:00:20.000Z");
  assert.deepEqual(read.waiting, {
    attempt_id: "att_1",
    provider: "sim-openai",
    reason: "rate_limited",
    until: "2026-12-04T00:00:20.000Z",
    waits: 1,
  });
  // Nothing of a waiting attempt is in flight: the fallback button may supersede it.
  assert.equal(blockingAttempt(read), null);
});

test("attempt_waiting never settles a job, as the gateway writes it", () => {
  const detail = { reason: "rate_limited", capacity: "rate_limited", retry_after_s: 2, until: "2026-12-07T07:00:02Z", waits: 1 };
  const data = JSON.stringify({ id: 4, kind: "attempt_waiting", attempt_id: "att_1", detail });
  assert.equal(mayHaveSettled({ event: "attempt_waiting", data, id: "4", retry: null }), false);
});

test("a full queue is retried after its Retry-After, with the same key and body, into one job", async () => {
  const { onejob, sent, slept, retried } = scripted(queueFull, queueFull, () => created());
  const result = await onejob.createJob(INTENTION);
  assert.equal(result.status, 201);
  assert.equal(result.tries, 3);
  assert.equal(slept.length, 2);
  assert.ok(slept.every((ms) => ms >= 5000 && ms <= 5100), slept.join());
  assert.deepEqual(retried.map((r) => [r.status, r.type]), [
    [503, "urn:onejob:queue-full"],
    [503, "urn:onejob:queue-full"],
  ]);
  assert.deepEqual([...new Set(sent.map((s) => s.headers["Idempotency-Key"]))], [`"${INTENTION.key}"`]);
  assert.deepEqual([...new Set(sent.map((s) => s.body))], [INTENTION.body]);
});

test("a queue still full when the retries run out throws QueueFull, an Unavailable", async () => {
  let now = 1_000_000;
  const r = new Retrying({ deadlineMs: 8_000 }, { clock: () => now, random: () => 0 });
  r.timeoutMs();
  assert.equal(r.waitAfterStatus(503, "5", null, "urn:onejob:queue-full"), 5000);
  now += 5000;
  r.timeoutMs();
  assert.throws(
    () => r.waitAfterStatus(503, "5", null, "urn:onejob:queue-full"),
    (error) => error instanceof QueueFull && error instanceof Unavailable && error.tries === 2 && error.lastStatus === 503,
  );
  // The database's 503, or no answer at all, after a full queue's is a plain Unavailable.
  const other = new Retrying({ deadlineMs: 100 }, { clock: () => now });
  other.timeoutMs();
  other.lastType = "urn:onejob:queue-full";
  assert.throws(
    () => other.waitAfterStatus(503, "1", "not_done", "urn:onejob:unavailable"),
    (error) => error.constructor === Unavailable && error.outcome === "not_done",
  );

  const { onejob } = scripted(queueFull, queueFull, queueFull);
  onejob.policy = { deadlineMs: 0 }; // no time for a second try
  await assert.rejects(onejob.createJob(INTENTION), (error) => error instanceof QueueFull && error.tries === 1);
});

test("deadlineS is sent in the body, the same on every try; none sends the intention's bytes", async () => {
  const { onejob, sent } = scripted(queueFull, () => created());
  await onejob.createJob(INTENTION, { deadlineS: 30 });
  assert.equal(sent[0].body, sent[1].body);
  assert.deepEqual(JSON.parse(sent[0].body), { ...JSON.parse(INTENTION.body), deadline_s: 30 });

  const run = scripted(() => created(job("succeeded")), () => created(job("succeeded")));
  await run.onejob.run(INTENTION, { deadlineS: 12.5 });
  await run.onejob.run(INTENTION);
  assert.equal(JSON.parse(run.sent[0].body).deadline_s, 12.5);
  assert.equal(run.sent[1].body, INTENTION.body);

  for (const bad of [0, -1, Infinity, NaN, "30", true]) {
    const { onejob: refused, sent: none } = scripted();
    await assert.rejects(refused.createJob(INTENTION, { deadlineS: bad }), TypeError);
    assert.equal(none.length, 0);
  }
});

test("a job failed by its deadline is told from one a provider failed", () => {
  const expired = job("failed", { error: { outcome: "definite", reason: "job_deadline", message: "too late" } });
  assert.equal(deadlinePassed(expired), true);
  assert.equal(failureReason(expired), "job_deadline");
  const broken = job("failed", { error: { outcome: "definite", reason: "http_500" } });
  assert.equal(deadlinePassed(broken), false);
  assert.equal(failureReason(broken), "http_500");
  assert.equal(failureReason(job("queued", { error: expired.error })), null); // reopened
});
