// Types of onejob-client (src/*.js). Hand-written; keep in step with the code.

// ---- the job ---------------------------------------------------------------------------

export type JobStatus = "queued" | "running" | "unknown" | "succeeded" | "failed" | "cancelled";
export type AttemptState =
  | "starting"
  | "running"
  | "succeeded"
  | "lost"
  | "failed"
  | "cancelled"
  | "unknown"
  /** the provider said not now before doing anything: sent again no earlier than ready_at */
  | "waiting";
export type AttemptReason = "initial" | "failover" | "hedge" | "manual";

export interface Attempt {
  id: string;
  number: number;
  provider: string;
  reason: AttemptReason;
  state: AttemptState;
  error: Record<string, unknown> | null;
  started_at: string | null;
  finished_at: string | null;
  /** a waiting attempt is not sent again before this time; null otherwise (and from older gateways) */
  ready_at?: string | null;
  /** how many times its provider said not now to it */
  waits?: number;
}

/**
 * Why a job waits: its provider said so (rate_limited, overloaded), or the gateway did not
 * send it (paced, paused, circuit_open, concurrency).
 */
export type WaitingReason =
  | "rate_limited"
  | "overloaded"
  | "paced"
  | "paused"
  | "circuit_open"
  | "concurrency"
  | (string & {});

/** Why a queued job waits for its provider's capacity, and until when. */
export interface JobWaiting {
  /** the waiting attempt */
  attempt_id: string;
  provider: string;
  reason: WaitingReason;
  /** not sent again before this time (RFC 3339 UTC) */
  until: string | null;
  waits: number;
}

export interface Job {
  id: string;
  owner: string;
  idempotency_key: string;
  contract: string;
  provider: string;
  status: JobStatus;
  version: number;
  completed_by: string | null;
  result: Record<string, unknown> | null;
  error: Record<string, unknown> | null;
  created_at: string;
  updated_at: string;
  /** nothing is sent for the job after this time; null (or absent) from older gateways */
  deadline_at?: string | null;
  /** set while the job waits for its provider's capacity: why, and until when */
  waiting?: JobWaiting | null;
  /** the W3C trace context it was created in; null: none (absent from older gateways) */
  trace?: { traceparent: string; trace_id: string; tracestate: string | null } | null;
  attempts: Attempt[];
}

/** Job statuses nothing changes on its own: decided, or unknown. */
export const SETTLED: readonly JobStatus[];
/** Attempt states that block a new attempt. */
export const IN_PROGRESS: readonly AttemptState[];
export function isSettled(job: Pick<Job, "status">): boolean;
/** Whether the job is decided: succeeded, failed or cancelled (not unknown). */
export function isDecided(job: Pick<Job, "status">): boolean;
/** The attempt that blocks a new one (starting, running or unknown; a waiting one does not). */
export function blockingAttempt(job: Pick<Job, "attempts">): Attempt | null;
/** Why a failed job failed (its error.reason, e.g. "job_deadline"); null unless failed. */
export function failureReason(job: Pick<Job, "status" | "error">): string | null;
/** Whether the job failed because its deadline passed while it waited ("job_deadline"). */
export function deadlinePassed(job: Pick<Job, "status" | "error">): boolean;

// ---- the intention ---------------------------------------------------------------------

export const MAX_KEY_LENGTH: 255;
/** A fresh random Idempotency-Key (a UUID4). */
export function newKey(): string;
/** `key` if onejob accepts it as an Idempotency-Key; throws a TypeError otherwise. */
export function checkKey(key: string): string;
/** `key` as an RFC 8941 sf-string. */
export function keyHeader(key: string): string;

export interface IntentionFields {
  contract: string;
  input: Record<string, unknown>;
  provider?: string | null;
  key?: string;
}

/** One job's worth of wanting: contract, input, provider, and its key, made once. */
export class Intention {
  constructor(fields: IntentionFields);
  readonly contract: string;
  readonly input: Record<string, unknown>;
  readonly provider: string | null;
  readonly key: string;
  /** The body sent on every try: the same bytes for every retry. */
  readonly body: string;
  static create(
    contract: string,
    input: Record<string, unknown>,
    options?: { provider?: string | null; key?: string },
  ): Intention;
  toJSON(): Required<Omit<IntentionFields, "provider">> & { provider: string | null };
  static fromJSON(data: string | IntentionFields): Intention;
}

// ---- keeping it across reloads ---------------------------------------------------------

export const STORAGE_PREFIX: "onejob.intention.";

export interface StorageLike {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
}

export class RememberedIntention {
  readonly name: string;
  readonly intention: Intention;
  /** The job this intention made, once known. */
  jobId: string | null;
  /** Whether a request for it may have left: then a reload resumes it. */
  sent: boolean;
  /** Note that a request is about to leave (call it before sending). */
  markSent(): void;
  /** Note the job the intention made. */
  setJob(jobId: string): void;
  /** Drop it: the next rememberIntention with this name makes a new intention. */
  forget(): void;
}

/** The intention stored under `name`, or a new one from `make()`, stored (sessionStorage). */
export function rememberIntention(
  name: string,
  make: () => Intention,
  storage?: StorageLike,
): RememberedIntention;

// ---- retries ---------------------------------------------------------------------------

export interface RetryPolicy {
  /** ms for one call, every try and wait included (60 000) */
  deadlineMs: number;
  /** ms one try may take, plus any Prefer: wait (30 000) */
  requestTimeoutMs: number;
  /** ms before the second try (250) */
  initialBackoffMs: number;
  /** ms, the longest wait between tries (5 000) */
  maxBackoffMs: number;
  /** ms: a longer Retry-After is cut to this (60 000) */
  maxRetryAfterMs: number;
}

export const DEFAULT_POLICY: Readonly<RetryPolicy>;
export const RETRY_STATUSES: ReadonlySet<number>;
/** Retry-After in ms (delta-seconds or an HTTP date); null when absent or unreadable. */
export function parseRetryAfter(value: string | null | undefined, now?: number): number | null;

export class Retrying {
  constructor(
    policy?: Partial<RetryPolicy>,
    options?: { extraMs?: number; clock?: () => number; random?: () => number },
  );
  readonly policy: RetryPolicy;
  tries: number;
  lastStatus: number | null;
  lastOutcome: string | null;
  remainingMs(): number;
  timeoutMs(extraMs?: number): number;
  backoffMs(): number;
  /** the last 503's problem type */
  lastType: string | null;
  waitAfterStatus(
    status: number,
    retryAfter: string | null,
    outcome?: string | null,
    problemType?: string | null,
  ): number | null;
  waitAfterError(error: unknown): number;
}

/** What onRetry is told before each wait between tries. */
export interface RetryInfo {
  method: string;
  path: string;
  /** requests sent so far, all with the same key and body */
  tries: number;
  delayMs: number;
  /** the status that is retried, null for a network error or a timeout */
  status: number | null;
  /** a 503's problem type: "urn:onejob:queue-full", "urn:onejob:unavailable" (else null) */
  type?: string | null;
  error?: unknown;
}

// ---- the event stream ------------------------------------------------------------------

export const EVENT_STREAM: "text/event-stream";

export interface ServerSentEvent {
  /** the event: field, "message" when absent */
  event: string;
  /** the data: lines joined with LF */
  data: string;
  /** the last event id when this event was dispatched */
  id: string;
  /** the reconnection delay in ms, when the stream set one */
  retry: number | null;
}

export class SSEDecoder {
  constructor(lastEventId?: string);
  lastEventId: string;
  retry: number | null;
  comments: number;
  /** Decode a chunk and return the events it completed. */
  feed(chunk: Uint8Array | string): ServerSentEvent[];
}

export function eventJSON(event: ServerSentEvent): unknown;
export function mayHaveSettled(event: ServerSentEvent): boolean;
/** The job an `event: job` carries (the gateway sends one after each change), or null. */
export function jobOf(event: ServerSentEvent): Job | null;

// ---- the client ------------------------------------------------------------------------

export const VERSION: string;
export const MAX_WAIT: 60;
export const STREAM_RECONNECT_MS: number;
export const STREAM_SILENCE_MS: number;

export interface ClientOptions {
  /** the gateway; "" in a page: the page's own origin */
  baseUrl?: string;
  /** leave out in a browser: the page's server adds it */
  apiKey?: string | null;
  policy?: Partial<RetryPolicy>;
  fetch?: typeof fetch;
  onRetry?: ((info: RetryInfo) => void) | null;
  headers?: Record<string, string>;
  /**
   * The current trace context's headers (traceparent, tracestate), asked before each
   * request; with @opentelemetry/api: `propagation.inject(context.active(), headers)`.
   */
  traceContext?: (() => Record<string, string>) | null;
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

/** A W3C trace context for the job to join (sent with every try of the creation). */
export interface TraceContextOptions {
  traceparent?: string;
  tracestate?: string;
}

export interface Created {
  job: Job;
  /** Idempotent-Replayed: true: this key had already made this job; not a new one */
  replayed: boolean;
  /** 201 (new) or 200 (replayed) */
  status: number;
  /** requests sent for this call, all with the same key and body */
  tries: number;
}

export interface AttemptAdded {
  job: Job & { attempt_id?: string };
  attemptId: string;
}

export type FallbackOutcome =
  | ({ kind: "added" } & AttemptAdded)
  | {
      kind: "still-in-progress";
      jobId: string;
      /** the attempt that blocks: wait for it (an unknown one waits for an operator) */
      attemptId: string;
      attemptState: AttemptState;
      detail: string;
    };

export interface WaitOptions {
  /** ms to wait in all (60 000); then the job is returned as it is */
  timeoutMs?: number;
  /** seconds of each Prefer: wait poll when there is no event stream (60) */
  pollWaitSeconds?: number;
  /** when to stop: isSettled by default (unknown included); isDecided follows an unknown job */
  until?: (job: Job) => boolean;
  onEvent?: (event: ServerSentEvent) => void;
  onJob?: (job: Job) => void;
  signal?: AbortSignal;
}

export interface RunOptions extends WaitOptions, TraceContextOptions {
  /** seconds: a shorter job deadline than the route's, if the job is made now (createJob) */
  deadlineS?: number;
}

export class OnejobClient {
  constructor(options?: ClientOptions);
  readonly baseUrl: string;
  onRetry: ((info: RetryInfo) => void) | null;
  /** false once the gateway answered the events path without a stream */
  streams: boolean;
  /**
   * Create the intention's job, or get it back. `deadlineS`: seconds, a shorter job
   * deadline than the route's; not part of the fingerprint, so a job already made keeps
   * its own. Throws QueueFull (an Unavailable) when the queue stayed full to the deadline.
   */
  createJob(
    intention: Intention,
    options?: { waitSeconds?: number; signal?: AbortSignal; deadlineS?: number } & TraceContextOptions,
  ): Promise<Created>;
  getJob(jobId: string, options?: { waitSeconds?: number; signal?: AbortSignal }): Promise<Job>;
  requestAttempt(
    jobId: string,
    provider: string,
    options?: { signal?: AbortSignal },
  ): Promise<AttemptAdded>;
  fallback(jobId: string, provider: string, options?: { signal?: AbortSignal }): Promise<FallbackOutcome>;
  run(intention: Intention, options?: RunOptions): Promise<Job>;
  waitForJob(jobId: string, options?: WaitOptions): Promise<Job>;
}

// ---- errors ----------------------------------------------------------------------------

export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  [member: string]: unknown;
}

export class OnejobError extends Error {}
/** Retried until the deadline, never answered; retrying later with the same intention is safe. */
export class Unavailable extends OnejobError {
  readonly tries: number;
  readonly lastStatus: number | null;
  /** a 503's outcome: "unknown" (may have been written) or "not_done" */
  readonly outcome: string | null;
}
/** The last answer was 503 urn:onejob:queue-full: nothing was made; try again later. */
export class QueueFull extends Unavailable {}
export class StreamUnsupported extends OnejobError {}
export class ProblemError extends OnejobError {
  constructor(status: number, problem: Problem);
  readonly status: number;
  readonly problem: Problem;
  readonly type: string;
  readonly title: string;
  readonly detail: string;
}
export class KeyReused extends ProblemError {
  /** the job the key already names */
  readonly jobId: string;
}
export class AttemptInProgress extends ProblemError {
  readonly attemptId: string;
  readonly attemptState: string;
}
export class JobClosed extends ProblemError {}
export class InvalidKey extends ProblemError {}
export class Unauthorized extends ProblemError {}
export class Forbidden extends ProblemError {}
export class NotFound extends ProblemError {}
export class InvalidInput extends ProblemError {
  /** one line per fault */
  readonly errors: string[];
}
export class UnknownContract extends ProblemError {}
export class UnknownProvider extends ProblemError {}
export class FallbackNotCertified extends ProblemError {}
export function problemError(status: number, problem: Problem): ProblemError;

/** Webhooks (Standard Webhooks): check what onejob sent, with WebCrypto. */
export declare const SECRET_PREFIX: "whsec_";
/** Seconds between a webhook's timestamp and now, at most. */
export declare const WEBHOOK_TOLERANCE: number;
export class WebhookVerificationError extends OnejobError {}
export type WebhookHeaders = { get(name: string): string | null } | Record<string, string>;
export interface WebhookEvent {
  type: "job.succeeded" | "job.failed" | "job.cancelled" | "attempt.unknown" | "webhook.test";
  timestamp: string;
  data: unknown;
}
/** The "v1,..." signature of one message, as onejob puts it in webhook-signature. */
export function signWebhook(
  secret: string,
  msgId: string,
  timestamp: number,
  body: string | Uint8Array | ArrayBuffer,
): Promise<string>;
/** Check a webhook's signature and timestamp; resolve to its payload, or reject with
 * WebhookVerificationError. `secret`: one whsec_ secret, or several while you rotate. */
export function verifyWebhook(
  body: string | Uint8Array | ArrayBuffer,
  headers: WebhookHeaders,
  secret: string | string[],
  options?: { tolerance?: number; now?: number },
): Promise<WebhookEvent>;
