// The key is made when the intention is made, kept in storage, and the same after a reload.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Intention, STORAGE_PREFIX, checkKey, keyHeader, rememberIntention } from "../src/index.js";

const TICKET = { ticket_id: "SUP-42", customer: { name: "Priya", plan: "pro" } };

class MemoryStorage {
  constructor() {
    this.items = new Map();
  }
  getItem(k) {
    return this.items.has(k) ? this.items.get(k) : null;
  }
  setItem(k, v) {
    this.items.set(k, String(v));
  }
  removeItem(k) {
    this.items.delete(k);
  }
}

test("the key is made when the intention is made, and never again", () => {
  const intention = Intention.create("ticket-triage@1", TICKET);
  assert.match(intention.key, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.notEqual(Intention.create("ticket-triage@1", TICKET).key, intention.key);
  assert.ok(Object.isFrozen(intention));
});

test("a stored intention comes back with the same key and body", () => {
  const intention = Intention.create("ticket-triage@1", TICKET, { provider: "sim-openai" });
  const again = Intention.fromJSON(JSON.stringify(intention));
  assert.equal(again.key, intention.key);
  assert.equal(again.body, intention.body);
  assert.deepEqual(JSON.parse(again.body), { contract: "ticket-triage@1", input: TICKET, provider: "sim-openai" });
});

test("changing the caller's object afterwards changes nothing", () => {
  const data = { ticket_id: "SUP-42" };
  const intention = Intention.create("ticket-triage@1", data);
  data.ticket_id = "SUP-43";
  assert.deepEqual(intention.input, { ticket_id: "SUP-42" });
  assert.equal(JSON.parse(intention.body).input.ticket_id, "SUP-42");
});

test("keys are checked, and sent as RFC 8941 strings", () => {
  assert.equal(checkKey("order-42"), "order-42");
  for (const bad of ["", "x".repeat(256), "naïve", "tab\there"]) assert.throws(() => checkKey(bad), TypeError);
  assert.equal(keyHeader('a "quoted" \\ key'), '"a \\"quoted\\" \\\\ key"');
});

test("rememberIntention keeps one intention per name across reloads until forgotten", () => {
  const storage = new MemoryStorage();
  let made = 0;
  const make = () => {
    made += 1;
    return Intention.create("ticket-triage@1", TICKET);
  };
  const first = rememberIntention("triage:SUP-42", make, storage);
  assert.equal(first.sent, false);
  first.markSent();
  // A reload: the page's code runs again and asks for the same intention.
  const reloaded = rememberIntention("triage:SUP-42", make, storage);
  assert.equal(made, 1);
  assert.equal(reloaded.intention.key, first.intention.key);
  assert.equal(reloaded.intention.body, first.intention.body);
  assert.equal(reloaded.sent, true);
  assert.equal(reloaded.jobId, null);
  reloaded.setJob("job_1");
  assert.equal(rememberIntention("triage:SUP-42", make, storage).jobId, "job_1");
  assert.ok(storage.getItem(`${STORAGE_PREFIX}triage:SUP-42`));

  const other = rememberIntention("triage:SUP-43", make, storage);
  assert.notEqual(other.intention.key, first.intention.key);
  reloaded.forget();
  const fresh = rememberIntention("triage:SUP-42", make, storage);
  assert.notEqual(fresh.intention.key, first.intention.key);
  assert.equal(made, 3);
});
