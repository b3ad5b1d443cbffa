// What can go wrong when calling onejob, and what the caller should do about it.
//
//   OnejobError
//   ├── Unavailable            retried until the deadline, never answered: 503, 429, 502,
//   │   │                      504, network errors, timeouts. Safe to try again later with
//   │   │                      the same intention (same key, same body).
//   │   └── QueueFull          the last answer was 503 queue-full: the gateway has too many
//   │                          jobs waiting to be sent, and made none for this key
//   ├── StreamUnsupported      the gateway answers the events path without a stream
//   └── ProblemError           any other answer that is not a success (RFC 9457 problem)
//       ├── KeyReused          409: this key already made a job from another request
//       ├── AttemptInProgress  409: an attempt of the job is starting, running or unknown
//       ├── JobClosed          409: the job already succeeded or was cancelled
//       ├── InvalidKey         400: the Idempotency-Key itself was refused
//       ├── Unauthorized       401, Forbidden 403, NotFound 404
//       ├── InvalidInput       422: the body or the input breaks the contract's schema
//       ├── UnknownContract    422, UnknownProvider 422
//       └── FallbackNotCertified  422: that provider may not stand in for the primary
//
// Only Unavailable is worth retrying, and the client has already done so; every
// ProblemError would come back the same.

const PROBLEM_BASE = "urn:onejob:";
/** The problem type of a creation refused because the gateway's queue is full (503). */
export const QUEUE_FULL = `${PROBLEM_BASE}queue-full`;

export class OnejobError extends Error {
  constructor(message) {
    super(message);
    this.name = new.target.name;
  }
}

/** onejob did not answer in time; retrying later with the same intention is safe. */
export class Unavailable extends OnejobError {
  constructor(message, { tries = 0, lastStatus = null, outcome = null, cause } = {}) {
    super(message);
    /** requests sent, all with the same key and body */
    this.tries = tries;
    /** the last HTTP status, null when none came */
    this.lastStatus = lastStatus;
    /** a 503's outcome: "unknown" (may have been written) or "not_done" */
    this.outcome = outcome;
    if (cause !== undefined) this.cause = cause;
  }
}

/** onejob's queue is full and no job was made; retrying later with the same intention is safe. */
export class QueueFull extends Unavailable {}

/** The gateway answered the events path without an event stream. */
export class StreamUnsupported extends OnejobError {}

/** onejob refused the request (an RFC 9457 problem); the same request gets the same. */
export class ProblemError extends OnejobError {
  constructor(status, problem) {
    const title = problem.title || problem.type || "error";
    super(`${status} ${title}${problem.detail ? `: ${problem.detail}` : ""}`);
    this.status = status;
    /** the whole problem document */
    this.problem = problem;
    this.type = problem.type || "about:blank";
    this.title = problem.title || "";
    this.detail = problem.detail || "";
  }
}

/** This Idempotency-Key already made a job from a different request. */
export class KeyReused extends ProblemError {
  constructor(status, problem) {
    super(status, problem);
    /** the job the key already names */
    this.jobId = problem.job_id || "";
  }
}

/** An attempt of this job is starting, running or unknown: wait, do not retry it. */
export class AttemptInProgress extends ProblemError {
  constructor(status, problem) {
    super(status, problem);
    this.attemptId = problem.attempt_id || "";
    this.attemptState = problem.attempt_state || "";
  }
}

export class JobClosed extends ProblemError {}
export class InvalidKey extends ProblemError {}
export class Unauthorized extends ProblemError {}
export class Forbidden extends ProblemError {}
export class NotFound extends ProblemError {}

/** The request does not match the contract's schema; `errors` has one line per fault. */
export class InvalidInput extends ProblemError {
  constructor(status, problem) {
    super(status, problem);
    this.errors = Array.isArray(problem.errors) ? problem.errors.map(String) : [];
  }
}

export class UnknownContract extends ProblemError {}
export class UnknownProvider extends ProblemError {}
export class FallbackNotCertified extends ProblemError {}

const BY_TYPE = new Map([
  ["idempotency-key-reused", KeyReused],
  ["attempt-in-progress", AttemptInProgress],
  ["job-closed", JobClosed],
  ["invalid-idempotency-key", InvalidKey],
  ["unauthorized", Unauthorized],
  ["forbidden", Forbidden],
  ["not-found", NotFound],
  ["invalid-input", InvalidInput],
  ["unknown-contract", UnknownContract],
  ["unknown-provider", UnknownProvider],
  ["fallback-not-certified", FallbackNotCertified],
]);

/** The most specific error for a problem answer. */
export function problemError(status, problem) {
  const type = String(problem.type || "");
  const name = type.startsWith(PROBLEM_BASE) ? type.slice(PROBLEM_BASE.length) : "";
  const Cls = BY_TYPE.get(name) || ProblemError;
  return new Cls(status, problem);
}
