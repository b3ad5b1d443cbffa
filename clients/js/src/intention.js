// An intention: what one person wants done once, and the Idempotency-Key that says so.
//
// The key is made when the intention is made (when the form is shown), not when a request
// is sent: every request for this intention, the first and every retry, after a timeout,
// a reload or a double click, carries the same key and the same body. A new key means a
// new job. In a page, keep it with rememberIntention (storage.js) so a reload finds it.

export const MAX_KEY_LENGTH = 255; // characters, printable ASCII (docs/api.md)

/** A fresh random Idempotency-Key (a UUID4). */
export function newKey() {
  const c = globalThis.crypto;
  if (c && typeof c.randomUUID === "function") return c.randomUUID();
  // crypto.randomUUID needs a secure context (https or localhost): build the same shape.
  const b = new Uint8Array(16);
  c.getRandomValues(b);
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** Return `key` if onejob accepts it as an Idempotency-Key, else throw a TypeError. */
export function checkKey(key) {
  if (typeof key !== "string" || key.length < 1 || key.length > MAX_KEY_LENGTH) {
    throw new TypeError(`an Idempotency-Key has 1-${MAX_KEY_LENGTH} characters`);
  }
  if (!/^[\x20-\x7e]+$/.test(key)) throw new TypeError("an Idempotency-Key is printable ASCII");
  return key;
}

/** `key` as an RFC 8941 sf-string, which carries any printable ASCII key. */
export function keyHeader(key) {
  return `"${key.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;
}

export class Intention {
  /**
   * @param {{contract: string, input: object, provider?: string | null, key?: string}} fields
   */
  constructor({ contract, input, provider = null, key = newKey() }) {
    this.contract = contract;
    this.provider = provider ?? null;
    this.key = checkKey(key);
    const document = { contract, input };
    if (this.provider !== null) document.provider = this.provider;
    /** The body sent on every try, made once: the same bytes for every retry. */
    this.body = JSON.stringify(document);
    // A copy: changing the caller's object afterwards must not change the intention.
    this.input = JSON.parse(JSON.stringify(input));
    Object.freeze(this);
  }

  /** Make an intention now, with a new key unless the caller brings one. */
  static create(contract, input, { provider = null, key } = {}) {
    return new Intention({ contract, input, provider, key: key ?? newKey() });
  }

  /** What to store to resume this intention later (JSON.stringify uses it). */
  toJSON() {
    return { key: this.key, contract: this.contract, input: this.input, provider: this.provider };
  }

  /** Rebuild a stored intention: same key, same body. */
  static fromJSON(data) {
    const fields = typeof data === "string" ? JSON.parse(data) : data;
    return new Intention(fields);
  }
}
