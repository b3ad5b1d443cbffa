// onejob's JavaScript client: one Idempotency-Key per intention, retries that are safe.
// ES module, fetch only, no dependencies; the same in browsers and Node (18+).
//
//   import { OnejobClient, Intention, rememberIntention } from "onejob-client";
//
//   // When the form is shown: the intention and its key, kept across reloads.
//   const slot = rememberIntention("triage:SUP-42", () => Intention.create("ticket-triage@1", input));
//   const onejob = new OnejobClient({ baseUrl: "" });   // the page's server adds the API key
//   // On click (and on load, if slot.sent): the same key every time.
//   slot.markSent();
//   const { job } = await onejob.createJob(slot.intention);
//   slot.setJob(job.id);
//   const done = await onejob.waitForJob(job.id, { onJob: render });

export {
  AttemptInProgress,
  FallbackNotCertified,
  Forbidden,
  InvalidInput,
  InvalidKey,
  JobClosed,
  KeyReused,
  NotFound,
  OnejobError,
  ProblemError,
  QueueFull,
  StreamUnsupported,
  Unauthorized,
  Unavailable,
  UnknownContract,
  UnknownProvider,
  problemError,
} from "./errors.js";
export { Intention, MAX_KEY_LENGTH, checkKey, keyHeader, newKey } from "./intention.js";
export { DEFAULT_POLICY, RETRY_STATUSES, Retrying, parseRetryAfter } from "./retry.js";
export { EVENT_STREAM, SSEDecoder, eventJSON } from "./sse.js";
export { RememberedIntention, STORAGE_PREFIX, rememberIntention } from "./storage.js";
export {
  SECRET_PREFIX,
  WEBHOOK_TOLERANCE,
  WebhookVerificationError,
  signWebhook,
  verifyWebhook,
} from "./webhooks.js";
export {
  IN_PROGRESS,
  MAX_WAIT,
  OnejobClient,
  SETTLED,
  STREAM_RECONNECT_MS,
  STREAM_SILENCE_MS,
  VERSION,
  blockingAttempt,
  deadlinePassed,
  failureReason,
  isDecided,
  isSettled,
  jobOf,
  mayHaveSettled,
} from "./client.js";
