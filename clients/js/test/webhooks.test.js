// verifyWebhook agrees with the reference Python library `standardwebhooks` (run through
// ONEJOB_PYTHON, else the repository's .venv): what it signs verifies here, what is signed
// here verifies there, both secrets of a rotation verify, and anything changed is refused.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

import { WebhookVerificationError, signWebhook, verifyWebhook } from "../src/index.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const BODY = JSON.stringify({ type: "job.succeeded", timestamp: "2026-12-07T17:00:00.000Z", data: { id: "job_1" } });

function python() {
  if (process.env.ONEJOB_PYTHON) return process.env.ONEJOB_PYTHON;
  const venv = path.join(ROOT, ".venv/bin/python");
  return existsSync(venv) ? venv : "python3";
}

// Ask the reference library: "secret" makes a secret, "sign" signs, "verify" verifies.
function reference(...args) {
  const script = `
import sys, json, datetime as dt
from standardwebhooks.webhooks import Webhook
from gateway.domain.webhooks import new_secret
op, *rest = sys.argv[1:]
if op == "secret":
    print(new_secret())
elif op == "sign":
    secret, msg_id, stamp, body = rest
    print(Webhook(secret).sign(msg_id, dt.datetime.fromtimestamp(int(stamp), dt.timezone.utc), body))
else:
    secret, msg_id, stamp, sig, body = rest
    headers = {"webhook-id": msg_id, "webhook-timestamp": stamp, "webhook-signature": sig}
    print(json.dumps(Webhook(secret).verify(body, headers)))
`;
  return execFileSync(python(), ["-c", script, ...args], { cwd: ROOT, encoding: "utf8" }).trim();
}

function headers(msgId, stamp, signature) {
  return { "webhook-id": msgId, "webhook-timestamp": String(stamp), "webhook-signature": signature };
}

test("a signature of the reference library verifies here, and one made here verifies there", async () => {
  const secret = reference("secret");
  const stamp = Math.floor(Date.now() / 1000);
  const theirs = reference("sign", secret, "msg_1", String(stamp), BODY);
  const event = await verifyWebhook(BODY, headers("msg_1", stamp, theirs), secret);
  assert.equal(event.type, "job.succeeded");
  const ours = await signWebhook(secret, "msg_1", stamp, BODY);
  assert.equal(ours, theirs);
  assert.equal(JSON.parse(reference("verify", secret, "msg_1", String(stamp), ours, BODY)).data.id, "job_1");
});

test("during a rotation either secret verifies the two signatures, and a Headers object works", async () => {
  const [fresh, old] = [reference("secret"), reference("secret")];
  const stamp = Math.floor(Date.now() / 1000);
  const both = `${await signWebhook(fresh, "msg_2", stamp, BODY)} ${await signWebhook(old, "msg_2", stamp, BODY)}`;
  for (const secret of [fresh, old, [reference("secret"), old]]) {
    const event = await verifyWebhook(new TextEncoder().encode(BODY), new Headers(headers("msg_2", stamp, both)), secret);
    assert.equal(event.data.id, "job_1");
  }
});

test("a changed body, a wrong secret, a stale timestamp or a missing header is refused", async () => {
  const secret = reference("secret");
  const stamp = Math.floor(Date.now() / 1000);
  const sig = await signWebhook(secret, "msg_3", stamp, BODY);
  const cases = [
    [BODY.replace("succeeded", "failed"), headers("msg_3", stamp, sig), secret, /no signature/],
    [BODY, headers("msg_3", stamp, sig), reference("secret"), /no signature/],
    [BODY, headers("msg_3", stamp - 600, await signWebhook(secret, "msg_3", stamp - 600, BODY)), secret, /too far/],
    [BODY, { "webhook-id": "msg_3", "webhook-timestamp": String(stamp) }, secret, /webhook-signature header is missing/],
    [BODY, { ...headers("msg_3", stamp, sig), "webhook-timestamp": "soon" }, secret, /not a number/],
  ];
  for (const [body, sent, key, says] of cases) {
    await assert.rejects(verifyWebhook(body, sent, key), (error) => error instanceof WebhookVerificationError && says.test(error.message));
  }
});

test("without a global WebCrypto (Node 18) it verifies with node:crypto's, as package.json's engines promise", async () => {
  const engines = JSON.parse(readFileSync(path.join(ROOT, "clients/js/package.json"), "utf8")).engines.node;
  assert.equal(engines, ">=18");
  const secret = reference("secret");
  const stamp = Math.floor(Date.now() / 1000);
  const sig = reference("sign", secret, "msg_4", String(stamp), BODY);
  const index = pathToFileURL(path.join(ROOT, "clients/js/src/index.js")).href;
  // A Node with no globalThis.crypto, as Node 18 is for an ES module.
  const script = `
delete globalThis.crypto;
if (globalThis.crypto !== undefined) throw new Error("crypto is still global");
const { verifyWebhook, signWebhook } = await import(${JSON.stringify(index)});
const [secret, stamp, sig, body] = process.argv.slice(1);
const headers = { "webhook-id": "msg_4", "webhook-timestamp": stamp, "webhook-signature": sig };
const event = await verifyWebhook(body, headers, secret);
console.log(JSON.stringify({ id: event.data.id, ours: await signWebhook(secret, "msg_4", Number(stamp), body) }));
`;
  const out = execFileSync(process.execPath, ["--input-type=module", "-e", script, secret, String(stamp), sig, BODY], { encoding: "utf8" });
  assert.deepEqual(JSON.parse(out), { id: "job_1", ours: sig });
});
