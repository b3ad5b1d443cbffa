// Verify a webhook onejob sent (Standard Webhooks), with WebCrypto only: browsers, and Node
// 18 or newer (Node 19+ and browsers have it as globalThis.crypto; Node 18 only as
// node:crypto's webcrypto, which is then imported).
//
//   import { verifyWebhook, WebhookVerificationError } from "onejob-client";
//
//   const body = await request.text();                       // the raw body, as received
//   const event = await verifyWebhook(body, request.headers, secret);   // "whsec_..."
//   // event.type: "job.succeeded", ...; event.data: the job as GET /v1/jobs/{id} shows it.
//   // request.headers.get("webhook-id") is the same on every retry: dedupe on it.
//
// The signature is "v1,<base64 HMAC-SHA256 of `${id}.${timestamp}.${body}`>" keyed by the
// base64-decoded rest of the whsec_ secret; during a rotation the header carries one per
// secret, space-separated, and either verifies. The timestamp must be within `tolerance`
// seconds of now, so a captured request cannot be replayed later.

import { OnejobError } from "./errors.js";

export const SECRET_PREFIX = "whsec_";
/** Seconds between a webhook's timestamp and now, at most. */
export const WEBHOOK_TOLERANCE = 300;

export class WebhookVerificationError extends OnejobError {}

function header(headers, name) {
  const value =
    typeof headers.get === "function"
      ? headers.get(name)
      : Object.entries(headers).find(([key]) => key.toLowerCase() === name)?.[1];
  if (value === undefined || value === null) {
    throw new WebhookVerificationError(`the ${name} header is missing`);
  }
  return String(value);
}

function fromBase64(text) {
  let binary;
  try {
    binary = atob(text);
  } catch {
    throw new WebhookVerificationError("the secret is not a whsec_ secret");
  }
  return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}

function toBase64(bytes) {
  return btoa(String.fromCharCode(...new Uint8Array(bytes)));
}

function asBytes(body) {
  return typeof body === "string" ? new TextEncoder().encode(body) : new Uint8Array(body);
}

/** Return the "v1,..." signature of one message, as onejob puts it in webhook-signature. */
export async function signWebhook(secret, msgId, timestamp, body) {
  const raw = fromBase64(secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret);
  const subtle = await subtleCrypto();
  const key = await subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const head = new TextEncoder().encode(`${msgId}.${timestamp}.`);
  const bytes = asBytes(body);
  const signed = new Uint8Array(head.length + bytes.length);
  signed.set(head);
  signed.set(bytes, head.length);
  return `v1,${toBase64(await subtle.sign("HMAC", key, signed))}`;
}

let nodeSubtle;

// WebCrypto's SubtleCrypto: the global one (browsers, Node 19+, Deno, Bun), else Node 18's
// node:crypto webcrypto; imported only where there is no global one.
async function subtleCrypto() {
  if (globalThis.crypto?.subtle) return globalThis.crypto.subtle;
  nodeSubtle ??= import(/* webpackIgnore: true */ "node:crypto").then(
    (module) => module.webcrypto?.subtle,
    () => undefined,
  );
  const subtle = await nodeSubtle;
  if (!subtle) throw new OnejobError("WebCrypto is missing: verifying webhooks needs a browser or Node 18+");
  return subtle;
}

function same(a, b) {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/**
 * Check a webhook's signature and timestamp; resolve to its JSON payload.
 * `secret`: the subscription's whsec_ secret, or an array of them (while you rotate).
 * Rejects with WebhookVerificationError when it does not verify.
 */
export async function verifyWebhook(body, headers, secret, { tolerance = WEBHOOK_TOLERANCE, now } = {}) {
  const msgId = header(headers, "webhook-id");
  const stampText = header(headers, "webhook-timestamp");
  const given = header(headers, "webhook-signature").split(" ").filter(Boolean);
  if (!/^\d+$/.test(stampText)) {
    throw new WebhookVerificationError("the webhook-timestamp is not a number");
  }
  const stamp = Number(stampText);
  const current = now ?? Date.now() / 1000;
  if (Math.abs(current - stamp) > tolerance) {
    throw new WebhookVerificationError("the webhook-timestamp is too far from now");
  }
  const secrets = Array.isArray(secret) ? secret : [secret];
  const expected = await Promise.all(secrets.map((s) => signWebhook(s, msgId, stamp, body)));
  if (!expected.some((e) => given.some((g) => same(e, g)))) {
    throw new WebhookVerificationError("no signature matches the secret");
  }
  const text = typeof body === "string" ? body : new TextDecoder().decode(asBytes(body));
  try {
    return JSON.parse(text);
  } catch {
    throw new WebhookVerificationError("the body is not JSON");
  }
}
