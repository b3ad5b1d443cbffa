// OnejobClient: onejob from a browser or Node, with fetch and nothing else.
//
// Creating a job sends the intention's key and body, and sends them again, unchanged,
// after a network error, a timeout, 429, 502, 503 or 504, until the deadline: the first
// try may have made the job (its answer was lost), and the retry then gets that job back
// (200, Idempotent-Replayed: true), never a second one. Waiting reads the job's event
// stream when the gateway serves one (resuming with Last-Event-ID after a drop), else
// polls with Prefer: wait.

import { AttemptInProgress, OnejobError, StreamUnsupported, problemError } from "./errors.js";
import { keyHeader } from "./intention.js";
import { RETRY_STATUSES, Retrying } from "./retry.js";
import { EVENT_STREAM, SSEDecoder, eventJSON } from "./sse.js";

export const VERSION = "0.1.0";
/** Seconds: the most Prefer: wait the gateway honours. */
export const MAX_WAIT = 60;
/** ms before reopening a dropped event stream that named no retry. */
export const STREAM_RECONNECT_MS = 1_000;
/** ms an open event stream may stay silent (heartbeats included) before it is taken for dead. */
export const STREAM_SILENCE_MS = 30_000;
/** Job statuses nothing changes on its own: decided, or unknown. */
export const SETTLED = Object.freeze(["succeeded", "failed", "cancelled", "unknown"]);
/** Attempt states that block a new attempt. */
export const IN_PROGRESS = Object.freeze(["starting", "running", "unknown"]);
/**
 * Audit event kinds that never settle a job: after any other event (a kind this client
 * does not know included) the waiter reads the job, unless the event names its status.
 */
const QUIET_KINDS = new Set([
  "job_created",
  "attempt_created",
  "attempt_running",
  // the provider said not now: the job stays queued, its attempt waits to be sent again
  "attempt_waiting",
  "replayed",
  "conflict",
  "attempt_refused",
  "cancel_refused",
  "reconciler_checked",
  "job_reopened",
  // written just after the failure it follows (a fallback the registry refused)
  "failover_skipped",
]);

/** Whether nothing will change on the job without someone acting. */
export function isSettled(job) {
  return SETTLED.includes(job.status);
}

/** Whether the job is decided: succeeded, failed or cancelled (not unknown). */
export function isDecided(job) {
  return job.status === "succeeded" || job.status === "failed" || job.status === "cancelled";
}

/** Why a failed job failed (its error.reason, e.g. "job_deadline"), or null unless failed. */
export function failureReason(job) {
  if (job.status !== "failed" || !job.error || typeof job.error !== "object") return null;
  return job.error.reason ?? null;
}

/**
 * Whether the job failed because its deadline passed before a provider could take it
 * ("job_deadline"), rather than because a provider failed it.
 */
export function deadlinePassed(job) {
  return failureReason(job) === "job_deadline";
}

/**
 * The attempt that blocks a new one (starting, running or unknown), or null. A waiting
 * attempt does not block: the fallback button supersedes it.
 */
export function blockingAttempt(job) {
  return (job.attempts || []).find((a) => IN_PROGRESS.includes(a.state)) ?? null;
}

/** The job an `event: job` carries (the gateway sends one after each change), or null. */
export function jobOf(event) {
  if (event.event !== "job") return null;
  const data = eventJSON(event);
  return data && typeof data === "object" && typeof data.id === "string" && typeof data.status === "string"
    ? data
    : null;
}

/** Whether the job may have settled with this stream event: worth reading the job. */
export function mayHaveSettled(event) {
  const data = eventJSON(event);
  let kind = event.event;
  if (data && typeof data === "object") {
    const status = data.status ?? data.job_status ?? data.job?.status;
    if (typeof status === "string") return SETTLED.includes(status);
    if (typeof data.kind === "string") kind = data.kind;
  }
  return !QUIET_KINDS.has(kind);
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(done, Math.max(0, ms));
    function done() {
      signal?.removeEventListener("abort", aborted);
      resolve();
    }
    function aborted() {
      clearTimeout(timer);
      reject(signal.reason);
    }
    signal?.addEventListener("abort", aborted, { once: true });
  });
}

/** A signal that aborts after `ms` or when `outer` aborts; call done() to let go of both. */
function deadlineSignal(outer, ms) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new DOMException("timed out", "TimeoutError")), ms);
  const forward = () => controller.abort(outer.reason);
  if (outer?.aborted) forward();
  else outer?.addEventListener("abort", forward, { once: true });
  return {
    signal: controller.signal,
    abort: (reason) => controller.abort(reason),
    rearm(nextMs) {
      clearTimeout(this._timer ?? timer);
      this._timer = setTimeout(() => controller.abort(new DOMException("silent", "TimeoutError")), nextMs);
    },
    done() {
      clearTimeout(timer);
      clearTimeout(this._timer);
      outer?.removeEventListener("abort", forward);
    },
  };
}

function preferWait(headers, waitSeconds) {
  if (!waitSeconds || waitSeconds <= 0) return 0;
  const seconds = Math.max(1, Math.min(MAX_WAIT, Math.floor(waitSeconds)));
  headers.Prefer = `wait=${seconds}`;
  return seconds * 1000;
}

/** The intention's body, with deadline_s added when asked (the same string without). */
function bodyWithDeadline(body, deadlineS) {
  if (deadlineS === undefined || deadlineS === null) return body;
  if (typeof deadlineS !== "number" || !(deadlineS > 0) || !Number.isFinite(deadlineS)) {
    throw new TypeError(`deadlineS is a number of seconds above 0, not ${deadlineS}`);
  }
  return JSON.stringify({ ...JSON.parse(body), deadline_s: deadlineS });
}

/** The headers of an explicit trace context (none without a traceparent). */
function traceHeaders(traceparent, tracestate) {
  if (!traceparent) return {};
  return tracestate ? { traceparent, tracestate } : { traceparent };
}

function parseJSON(text) {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

function raiseProblem(status, statusText, text) {
  let problem = parseJSON(text);
  if (!problem || typeof problem !== "object") problem = { title: statusText, detail: text.slice(0, 200) };
  throw problemError(status, problem);
}

export class OnejobClient {
  /**
   * @param {object} [options]
   * @param {string} [options.baseUrl] the gateway; "" in a page: the page's own origin
   * @param {string} [options.apiKey] leave out in a browser: the page's server adds it
   * @param {object} [options.policy] RetryPolicy fields (ms)
   * @param {typeof fetch} [options.fetch]
   * @param {(info: object) => void} [options.onRetry] told before each wait between tries
   * @param {Record<string, string>} [options.headers] sent with every request
   * @param {() => Record<string, string>} [options.traceContext] the current trace
   *   context's headers (`traceparent`, `tracestate`), asked before each request; with
   *   @opentelemetry/api: `() => { const h = {}; propagation.inject(context.active(), h); return h; }`
   */
  constructor({
    baseUrl = "",
    apiKey = null,
    policy = {},
    fetch: fetchImpl = undefined,
    onRetry = null,
    headers = {},
    traceContext = null,
    sleep: sleepImpl = sleep,
  } = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.policy = policy;
    this.onRetry = onRetry;
    this._fetch = fetchImpl ?? ((...args) => globalThis.fetch(...args));
    this._sleep = sleepImpl;
    this._headers = { ...headers };
    this._traceContext = traceContext;
    if (apiKey) this._headers.Authorization = `Bearer ${apiKey}`;
    /** false once the gateway answered the events path without a stream: poll then */
    this.streams = true;
  }

  /**
   * Create the intention's job, or get it back if an earlier try (or tab, or click)
   * already made it. `deadlineS` asks for a shorter job deadline than the route's (seconds
   * from the job's creation); it is not part of the fingerprint, so a job already made
   * keeps its own. Throws QueueFull (an Unavailable) when the gateway still refused new
   * jobs when the retries ran out. `traceparent` (and `tracestate`): the W3C trace context
   * the job joins, sent with every try; otherwise the client's `traceContext`, if any.
   */
  async createJob(intention, { waitSeconds = 0, signal, deadlineS, traceparent, tracestate } = {}) {
    const headers = {
      "Idempotency-Key": keyHeader(intention.key),
      "Content-Type": "application/json",
      ...traceHeaders(traceparent, tracestate),
    };
    const waitMs = preferWait(headers, waitSeconds);
    const body = bodyWithDeadline(intention.body, deadlineS);
    const call = { method: "POST", path: "/v1/jobs", headers, body, waitMs };
    const { response, text, tries } = await this._send(call, signal);
    if (!response.ok) raiseProblem(response.status, response.statusText, text);
    return {
      job: JSON.parse(text),
      replayed: (response.headers.get("idempotent-replayed") || "").toLowerCase() === "true",
      status: response.status,
      tries,
    };
  }

  /** The job; with waitSeconds, once it settles or after that many seconds. */
  async getJob(jobId, { waitSeconds = 0, signal } = {}) {
    const headers = {};
    const waitMs = preferWait(headers, waitSeconds);
    const call = { method: "GET", path: `/v1/jobs/${encodeURIComponent(jobId)}`, headers, waitMs };
    const { response, text } = await this._send(call, signal);
    if (!response.ok) raiseProblem(response.status, response.statusText, text);
    return JSON.parse(text);
  }

  /** Add a manual attempt on `provider`; throws AttemptInProgress while one is in progress. */
  async requestAttempt(jobId, provider, { signal } = {}) {
    const call = {
      method: "POST",
      path: `/v1/jobs/${encodeURIComponent(jobId)}/attempts`,
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ provider }),
      waitMs: 0,
    };
    const { response, text } = await this._send(call, signal);
    if (!response.ok) raiseProblem(response.status, response.statusText, text);
    const body = JSON.parse(text);
    return { job: body, attemptId: body.attempt_id ?? "" };
  }

  /**
   * Press the fallback button: {kind: "added"} or {kind: "still-in-progress"}, never a
   * second attempt while one may still be doing the work.
   */
  async fallback(jobId, provider, { signal } = {}) {
    try {
      const added = await this.requestAttempt(jobId, provider, { signal });
      return { kind: "added", ...added };
    } catch (error) {
      if (!(error instanceof AttemptInProgress)) throw error;
      return {
        kind: "still-in-progress",
        jobId,
        attemptId: error.attemptId,
        attemptState: error.attemptState,
        detail: error.detail,
      };
    }
  }

  /** Create the intention's job (or find it again) and wait for it to settle. */
  async run(intention, options = {}) {
    const { signal, deadlineS, traceparent, tracestate } = options;
    const created = await this.createJob(intention, { signal, deadlineS, traceparent, tracestate });
    options.onJob?.(created.job);
    if (isSettled(created.job)) return created.job;
    return this.waitForJob(created.job.id, options);
  }

  /**
   * The job once it settles (or as it is after timeoutMs). Reads the event stream when
   * the gateway serves one, else polls with Prefer: wait (pollWaitSeconds each, at most 60).
   * `until(job)` says when to stop: isSettled by default (unknown included); a page that
   * keeps following an unknown job until someone resolves it passes isDecided.
   */
  async waitForJob(
    jobId,
    { timeoutMs = 60_000, pollWaitSeconds = MAX_WAIT, until = isSettled, onEvent, onJob, signal } = {},
  ) {
    const waiting = new Waiting(timeoutMs, until);
    for (;;) {
      let job;
      if (this.streams) {
        try {
          job = await this._streamOnce(jobId, waiting, onEvent, onJob, signal);
        } catch (error) {
          if (!(error instanceof StreamUnsupported)) throw error;
          this.streams = false;
          continue;
        }
      } else {
        const left = waiting.remainingMs() / 1000;
        job = await this._observe(jobId, onJob, left >= 1 ? Math.min(left, pollWaitSeconds) : 0, signal);
        if (isSettled(job) && !until(job) && waiting.remainingMs() > 0) {
          // Prefer: wait answers a settled job at once: do not ask again in a tight loop.
          await this._sleep(Math.min(STREAM_RECONNECT_MS, waiting.remainingMs()), signal);
        }
      }
      if (until(job) || waiting.remainingMs() <= 0) return job;
    }
  }

  async _observe(jobId, onJob, waitSeconds, signal) {
    const job = await this.getJob(jobId, { waitSeconds, signal });
    onJob?.(job);
    return job;
  }

  async _streamOnce(jobId, waiting, onEvent, onJob, signal) {
    const decoder = waiting.newDecoder();
    const headers = { ...this._headers, Accept: EVENT_STREAM, "Cache-Control": "no-cache" };
    if (decoder.lastEventId) headers["Last-Event-ID"] = decoder.lastEventId;
    const silenceMs = () => Math.max(100, Math.min(STREAM_SILENCE_MS, waiting.remainingMs()));
    const guard = deadlineSignal(signal, silenceMs());
    try {
      const url = `${this.baseUrl}/v1/jobs/${encodeURIComponent(jobId)}/events`;
      const response = await this._fetch(url, { headers, signal: guard.signal });
      if (RETRY_STATUSES.has(response.status)) {
        await response.body?.cancel();
      } else {
        if (!response.ok) raiseProblem(response.status, response.statusText, await response.text());
        const media = (response.headers.get("content-type") || "").split(";")[0].trim().toLowerCase();
        if (media !== EVENT_STREAM) {
          await response.body?.cancel();
          throw new StreamUnsupported(`GET ${url} answered ${media || "no media type"}`);
        }
        const reader = response.body.getReader();
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          guard.rearm(silenceMs());
          for (const event of decoder.feed(value)) {
            onEvent?.(event);
            let job = jobOf(event);
            if (job !== null) {
              waiting.jobEvents = true; // the stream sends the job itself: no need to read it
              onJob?.(job);
            } else if (waiting.jobEvents || !mayHaveSettled(event)) {
              continue;
            } else {
              job = await this._observe(jobId, onJob, 0, signal);
            }
            if (waiting.until(job)) {
              guard.abort(new DOMException("settled", "AbortError"));
              return job;
            }
          }
        }
      }
    } catch (error) {
      if (signal?.aborted) throw signal.reason ?? error;
      if (error instanceof OnejobError) throw error;
      // The stream dropped (a network error, or silence past STREAM_SILENCE_MS): resume.
    } finally {
      guard.done();
    }
    const job = await this._observe(jobId, onJob, 0, signal);
    if (!waiting.until(job)) {
      waiting.reconnects += 1;
      await this._sleep(Math.min(waiting.reconnectDelayMs(), waiting.remainingMs()), signal);
    }
    return job;
  }

  /** Send until a final answer; the same key and body every time. */
  async _send(call, signal) {
    const retrying = new Retrying(this.policy, { extraMs: call.waitMs });
    for (;;) {
      const guard = deadlineSignal(signal, retrying.timeoutMs(call.waitMs));
      let response;
      let text;
      try {
        response = await this._fetch(this.baseUrl + call.path, {
          method: call.method,
          headers: { ...this._headers, ...this._traceContext?.(), ...call.headers },
          body: call.body,
          signal: guard.signal,
        });
        text = await response.text();
      } catch (error) {
        if (signal?.aborted) throw signal.reason ?? error;
        const delayMs = retrying.waitAfterError(error);
        this.onRetry?.({ method: call.method, path: call.path, tries: retrying.tries, delayMs, status: null, error });
        await this._sleep(delayMs, signal);
        continue;
      } finally {
        guard.done();
      }
      const problem = response.status === 503 ? parseJSON(text) : null;
      const outcome = problem?.outcome ?? null;
      const type = problem?.type ?? null;
      const delayMs = retrying.waitAfterStatus(response.status, response.headers.get("retry-after"), outcome, type);
      if (delayMs === null) return { response, text, tries: retrying.tries };
      const { method, path } = call;
      this.onRetry?.({ method, path, tries: retrying.tries, delayMs, status: response.status, type });
      await this._sleep(delayMs, signal);
    }
  }
}

/** The state of one wait for a job to settle: deadline, stream position. */
class Waiting {
  constructor(timeoutMs, until = isSettled) {
    this.deadline = Date.now() + timeoutMs;
    this.until = until;
    this.decoder = new SSEDecoder();
    this.reconnects = 0;
    this.jobEvents = false;
  }

  newDecoder() {
    this.decoder = new SSEDecoder(this.decoder.lastEventId);
    return this.decoder;
  }

  reconnectDelayMs() {
    return this.decoder.retry ?? STREAM_RECONNECT_MS;
  }

  remainingMs() {
    return Math.max(0, this.deadline - Date.now());
  }
}
