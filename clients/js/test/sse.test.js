// The event stream decoder against the WHATWG rules, however the bytes are cut.

import assert from "node:assert/strict";
import { test } from "node:test";

import { SSEDecoder, eventJSON } from "../src/index.js";

const STREAM =
  "\ufeffretry: 2500\n" +
  ": heartbeat\n" +
  "\n" +
  'id: 1\nevent: job_created\ndata: {"kind": "job_created"}\n\n' +
  "data: first line\r\ndata: second line\r\n\r\n" +
  "id: 3\rdata:no space\r\r" +
  "data\n\n" +
  "id\n" +
  "data: x\n\n" +
  "id: 7\0\ndata: nul ignored\n\n" +
  "retry: soon\nevent: only-event\n\n" +
  "id: 9\ndata: cut off at the end";

const EXPECTED = [
  { event: "job_created", data: '{"kind": "job_created"}', id: "1", retry: 2500 },
  { event: "message", data: "first line\nsecond line", id: "1", retry: 2500 },
  { event: "message", data: "no space", id: "3", retry: 2500 },
  { event: "message", data: "", id: "3", retry: 2500 },
  { event: "message", data: "x", id: "", retry: 2500 },
  { event: "message", data: "nul ignored", id: "", retry: 2500 },
];

function decode(chunks) {
  const decoder = new SSEDecoder();
  const events = chunks.flatMap((chunk) => decoder.feed(chunk));
  return { events, decoder };
}

test("the stream decodes by the WHATWG rules", () => {
  const { events, decoder } = decode([new TextEncoder().encode(STREAM)]);
  assert.deepEqual(events, EXPECTED);
  assert.equal(decoder.comments, 1);
  assert.equal(decoder.lastEventId, "9");
  assert.deepEqual(eventJSON(events[0]), { kind: "job_created" });
  assert.equal(eventJSON(events[1]), null);
});

test("any cutting of the bytes gives the same events", () => {
  const bytes = new TextEncoder().encode(STREAM);
  let seed = 42;
  const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  for (let round = 0; round < 300; round += 1) {
    const cuts = Array.from({ length: Math.floor(random() * 30) }, () => Math.floor(random() * bytes.length));
    const points = [0, ...cuts.sort((a, b) => a - b), bytes.length];
    const chunks = points.slice(1).map((end, i) => bytes.slice(points[i], end));
    const { events, decoder } = decode(chunks);
    assert.deepEqual(events, EXPECTED, `cuts ${points}`);
    assert.equal(decoder.lastEventId, "9");
  }
});

test("a CRLF cut between its CR and its LF is one line end", () => {
  const enc = (s) => new TextEncoder().encode(s);
  const { events } = decode([enc("data: a\r"), enc("\ndata: b\r"), enc("\n\r"), enc("\n")]);
  assert.deepEqual(events, [{ event: "message", data: "a\nb", id: "", retry: null }]);
});

test("a resumed decoder starts from the last event id", () => {
  const decoder = new SSEDecoder("41");
  assert.deepEqual(decoder.feed("data: next\n\n"), [{ event: "message", data: "next", id: "41", retry: null }]);
});
