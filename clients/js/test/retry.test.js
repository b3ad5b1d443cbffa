// When the client tries again, how long it waits, and when it gives up.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Retrying, Unavailable, parseRetryAfter } from "../src/index.js";

function clock(start = 1_000_000) {
  const c = () => c.now;
  c.now = start;
  return c;
}

test("Retry-After is read as seconds or as a date", () => {
  assert.equal(parseRetryAfter("3"), 3000);
  assert.equal(parseRetryAfter(null), null);
  assert.equal(parseRetryAfter("soon"), null);
  assert.equal(parseRetryAfter(new Date(1_000_030_000).toUTCString(), 1_000_000_000), 30_000);
});

test("not-now statuses are retried after Retry-After; every other answer is final", () => {
  for (const status of [429, 502, 503, 504]) {
    const r = new Retrying({}, { clock: clock(), random: () => 0 });
    r.timeoutMs();
    assert.equal(r.waitAfterStatus(status, "2"), 2000);
  }
  for (const status of [200, 201, 400, 401, 404, 408, 409, 413, 422, 500]) {
    const r = new Retrying({}, { clock: clock() });
    r.timeoutMs();
    assert.equal(r.waitAfterStatus(status, "1"), null);
  }
});

test("the backoff doubles with jitter up to its cap", () => {
  const policy = { initialBackoffMs: 250, maxBackoffMs: 1000, deadlineMs: 100_000 };
  const low = new Retrying(policy, { clock: clock(), random: () => 0 });
  const high = new Retrying(policy, { clock: clock(), random: () => 1 });
  const seen = [];
  for (let i = 0; i < 5; i += 1) {
    low.timeoutMs();
    high.timeoutMs();
    seen.push([low.backoffMs(), high.backoffMs()]);
  }
  assert.deepEqual(seen, [
    [125, 250],
    [250, 500],
    [500, 1000],
    [500, 1000],
    [500, 1000],
  ]);
});

test("a wait past the deadline gives up with Unavailable", () => {
  const c = clock();
  const r = new Retrying({ deadlineMs: 5000 }, { clock: c, random: () => 1 });
  r.timeoutMs();
  assert.ok(r.waitAfterStatus(503, "1", "unknown") > 0);
  c.now += 4500;
  r.timeoutMs();
  assert.throws(
    () => r.waitAfterStatus(503, "1", "unknown"),
    (error) => error instanceof Unavailable && error.tries === 2 && error.lastStatus === 503 && error.outcome === "unknown",
  );
  assert.throws(() => r.waitAfterError(new TypeError("fetch failed")), Unavailable);
});

test("a try never outlives the deadline", () => {
  const c = clock();
  const r = new Retrying({ deadlineMs: 10_000, requestTimeoutMs: 30_000 }, { clock: c });
  assert.equal(r.timeoutMs(), 10_000);
  c.now += 9_950;
  assert.equal(r.timeoutMs(), 100);
});
