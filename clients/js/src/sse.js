// Decode a text/event-stream body, bytes in, events out (no I/O).
//
// The rules are the WHATWG HTML standard's "event stream interpretation": lines end in
// CRLF, LF or CR (a CR at the end of one chunk and an LF at the start of the next are one
// line end); a line starting with ":" is a comment (the server's heartbeat); "field: value"
// with one optional space after the colon; data lines join with LF; an empty line
// dispatches the event, unless it has no data; "id" sets the last event id, which stays
// set for later events and is what a reconnection sends as Last-Event-ID (an id with a NUL
// is ignored); "retry" (digits only) sets the reconnection delay in milliseconds; an event
// cut off by the end of the stream is dropped.

/** The media type of an event stream, sent in Accept and checked in Content-Type. */
export const EVENT_STREAM = "text/event-stream";

export class SSEDecoder {
  /** @param {string} [lastEventId] the id to resume after (sent as Last-Event-ID) */
  constructor(lastEventId = "") {
    this._text = new TextDecoder("utf-8", { ignoreBOM: false });
    this._buffer = "";
    this._afterCR = false;
    this._event = "";
    this._data = [];
    this.lastEventId = lastEventId;
    /** @type {number | null} ms, from the last valid retry field */
    this.retry = null;
    /** comment lines seen (heartbeats) */
    this.comments = 0;
  }

  /**
   * Decode a chunk and return the events it completed.
   * @param {Uint8Array | string} chunk
   */
  feed(chunk) {
    let text = typeof chunk === "string" ? chunk : this._text.decode(chunk, { stream: true });
    if (!text) return [];
    if (this._afterCR && text.startsWith("\n")) text = text.slice(1);
    this._afterCR = text.endsWith("\r");
    this._buffer += text;
    const events = [];
    for (;;) {
      const end = lineEnd(this._buffer);
      if (end === null) return events;
      const [index, width] = end;
      const line = this._buffer.slice(0, index);
      this._buffer = this._buffer.slice(index + width);
      const event = this._line(line);
      if (event !== null) events.push(event);
    }
  }

  _line(line) {
    if (line === "") return this._dispatch();
    if (line.startsWith(":")) {
      this.comments += 1;
      return null;
    }
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this._event = value;
    else if (field === "data") this._data.push(value);
    else if (field === "id") {
      if (!value.includes("\0")) this.lastEventId = value;
    } else if (field === "retry") {
      if (/^[0-9]+$/.test(value)) this.retry = Number(value);
    }
    return null;
  }

  _dispatch() {
    const data = this._data;
    const event = this._event;
    this._data = [];
    this._event = "";
    if (data.length === 0) return null;
    return {
      event: event || "message",
      data: data.join("\n"),
      id: this.lastEventId,
      retry: this.retry,
    };
  }
}

/** Where the first line of `buffer` ends, and how long its line end is; null: no end yet. */
function lineEnd(buffer) {
  const cr = buffer.indexOf("\r");
  const lf = buffer.indexOf("\n");
  if (cr === -1 && lf === -1) return null;
  if (cr === -1 || (lf !== -1 && lf < cr)) return [lf, 1];
  // A CR at the very end may be half of a CRLF still in flight: end the line here and let
  // feed() drop the LF when it arrives.
  if (cr === buffer.length - 1) return [cr, 1];
  return [cr, buffer[cr + 1] === "\n" ? 2 : 1];
}

/** Parse an event's data as JSON; null when it is not JSON. */
export function eventJSON(event) {
  try {
    return JSON.parse(event.data);
  } catch {
    return null;
  }
}
