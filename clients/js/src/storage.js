// Keep an intention in sessionStorage so a reload resumes the same job.
//
//   const slot = rememberIntention("triage:SUP-42", () => Intention.create(contract, input));
//
// The first call (when the form is shown) makes the intention and stores it; every later
// call in the same tab, after a reload too, returns the stored one: same key, same job.
// Mark it sent before the first request leaves (slot.markSent()), note the job id when
// it comes (slot.setJob(id)); on load, a slot that was sent is resumed by sending the
// same intention again, which gives back the same job (200, Idempotent-Replayed), never a
// second one. Call slot.forget() when the person starts a new intention (a new ticket, a
// new order), and only then.
//
// sessionStorage is per tab: a second tab makes its own intention. Use localStorage (pass
// it as `storage`) to share one intention across tabs.

import { Intention } from "./intention.js";

export const STORAGE_PREFIX = "onejob.intention.";

export class RememberedIntention {
  constructor(name, record, storage) {
    this.name = name;
    this._storage = storage;
    /** @type {Intention} */
    this.intention = Intention.fromJSON(record.intention);
    /** @type {string | null} the job this intention made, once known */
    this.jobId = record.jobId ?? null;
    /** whether a request for it may have left (then a reload must resume, not ignore it) */
    this.sent = Boolean(record.sent);
  }

  /** Note that a request is about to leave (call it before sending). */
  markSent() {
    this.sent = true;
    this._save();
  }

  /** Note the job the intention made. */
  setJob(jobId) {
    this.jobId = jobId;
    this.sent = true;
    this._save();
  }

  /** Drop the intention: the next rememberIntention with this name makes a new one. */
  forget() {
    this._storage?.removeItem(STORAGE_PREFIX + this.name);
  }

  _save() {
    const record = { intention: this.intention.toJSON(), jobId: this.jobId, sent: this.sent };
    this._storage?.setItem(STORAGE_PREFIX + this.name, JSON.stringify(record));
  }
}

/**
 * Return the intention stored under `name`, or make one with `make()` and store it.
 * @param {string} name what the intention is about (a ticket id, an order id)
 * @param {() => Intention} make called only when nothing is stored yet
 * @param {Storage} [storage] sessionStorage by default
 */
export function rememberIntention(name, make, storage = globalThis.sessionStorage) {
  const raw = storage?.getItem(STORAGE_PREFIX + name);
  if (raw) {
    try {
      return new RememberedIntention(name, JSON.parse(raw), storage);
    } catch {
      // A record this version cannot read: make a new intention below.
    }
  }
  const slot = new RememberedIntention(name, { intention: make().toJSON() }, storage);
  slot._save();
  return slot;
}
