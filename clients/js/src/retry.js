// When to try a request again, and how long to wait first (no I/O: the client sleeps).
//
// A request is tried again, with the same key and the same body, when it may not have
// been answered: a network error or a timeout, or 429, 502, 503 or 504. Any other answer,
// success or refusal, is final: a 4xx would come back the same. The wait is the server's
// Retry-After when it sends one, else an exponential backoff with jitter (half the step
// plus a random part of the other half, as stripe-python does), capped; everything stops
// at the overall deadline, with Unavailable (QueueFull when the last answer was the
// gateway's 503 urn:onejob:queue-full, which is retried the same way: it comes with a
// Retry-After, and nothing was made for the key).

import { QUEUE_FULL, QueueFull, Unavailable } from "./errors.js";

/** Statuses that mean "not now": the same request may succeed later. */
export const RETRY_STATUSES = new Set([429, 502, 503, 504]);

export const DEFAULT_POLICY = Object.freeze({
  deadlineMs: 60_000, // one call, every try and wait included
  requestTimeoutMs: 30_000, // one try (plus any Prefer: wait)
  initialBackoffMs: 250,
  maxBackoffMs: 5_000,
  maxRetryAfterMs: 60_000, // a longer Retry-After is cut to this
});

/** Retry-After in ms (delta-seconds or an HTTP date); null when absent or unreadable. */
export function parseRetryAfter(value, now = Date.now()) {
  if (value === null || value === undefined) return null;
  const text = String(value).trim();
  if (/^[0-9]+$/.test(text)) return Number(text) * 1000;
  const when = Date.parse(text);
  return Number.isNaN(when) ? null : Math.max(0, when - now);
}

/** The state of one call's tries: waitAfter* say how long to sleep, or throw. */
export class Retrying {
  constructor(policy = DEFAULT_POLICY, { extraMs = 0, clock = Date.now, random = Math.random } = {}) {
    this.policy = { ...DEFAULT_POLICY, ...policy };
    this._clock = clock;
    this._random = random;
    this._deadline = clock() + this.policy.deadlineMs + extraMs;
    this.tries = 0;
    this.lastStatus = null;
    this.lastOutcome = null;
    /** the last 503's problem type */
    this.lastType = null;
  }

  remainingMs() {
    return Math.max(0, this._deadline - this._clock());
  }

  /** The timeout of the next try (extraMs: a Prefer: wait), and count the try. */
  timeoutMs(extraMs = 0) {
    this.tries += 1;
    return Math.max(100, Math.min(this.policy.requestTimeoutMs + extraMs, this.remainingMs()));
  }

  backoffMs() {
    const step = Math.min(
      this.policy.maxBackoffMs,
      this.policy.initialBackoffMs * 2 ** Math.max(0, this.tries - 1),
    );
    return step * (0.5 + 0.5 * this._random());
  }

  /**
   * ms to wait before trying again after this status, or null: the answer is final.
   * `outcome` and `problemType`: what a 503 said, for the error thrown at the deadline.
   */
  waitAfterStatus(status, retryAfterHeader, outcome = null, problemType = null) {
    if (!RETRY_STATUSES.has(status)) return null;
    this.lastStatus = status;
    this.lastOutcome = outcome;
    this.lastType = problemType;
    const retryAfter = parseRetryAfter(retryAfterHeader);
    const delay =
      retryAfter !== null
        ? // A little jitter on top, so clients told the same second do not come back in step.
          Math.min(retryAfter, this.policy.maxRetryAfterMs) + 100 * this._random()
        : this.backoffMs();
    return this._withinDeadline(delay, `onejob answered ${status}`);
  }

  /** ms to wait after a try that got no answer (network error, timeout), or throw. */
  waitAfterError(error) {
    this.lastStatus = null;
    this.lastType = null;
    return this._withinDeadline(this.backoffMs(), `no answer from onejob (${error?.message ?? error})`, error);
  }

  _withinDeadline(delay, why, cause) {
    if (delay >= this.remainingMs()) {
      const GaveUp = this.lastType === QUEUE_FULL ? QueueFull : Unavailable;
      throw new GaveUp(
        `${why}; gave up after ${this.tries} tries with the same key (${this.policy.deadlineMs / 1000} s deadline)`,
        { tries: this.tries, lastStatus: this.lastStatus, outcome: this.lastOutcome, cause },
      );
    }
    return delay;
  }
}
