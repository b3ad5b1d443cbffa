// A forwarder between a client and the gateway that does, per request, what a test
// scripts: "reset_before" (reset the connection, nothing forwarded), "reset_after"
// (forward, let the gateway answer, then reset: the answer is lost), "unavailable" (503
// urn:onejob:unavailable with Retry-After: 1), "cut_stream" (relay an event stream until
// its first event with an id has passed whole, then reset). unavailableFor(ms) answers
// every /v1 request 503 for that long. Every request is recorded when it arrives, with its
// Idempotency-Key and Last-Event-ID.

import http from "node:http";

const CUT_GRACE_MS = 500;

const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "host",
  "content-length",
  "content-encoding",
]);

/** A whole event (ended by a blank line) with an id line. */
const FIRST_EVENT_WITH_ID = /(?:^|\n)id:[^\n]*\n(?:[^\n]+\n)*\n/;

export async function startFaultProxy(target) {
  const scripts = new Map();
  const seen = [];
  let unavailableUntil = 0;

  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = Buffer.concat(chunks);
    const route = `${req.method} ${req.url.split("?")[0]}`;
    const action =
      Date.now() < unavailableUntil ? "unavailable" : (scripts.get(route)?.shift() ?? "forwarded");
    const record = {
      method: req.method,
      path: req.url.split("?")[0],
      key: req.headers["idempotency-key"] ?? null,
      lastEventId: req.headers["last-event-id"] ?? null,
      body: body.toString("utf8"),
      done: action,
      status: null,
    };
    seen.push(record);
    if (action === "reset_before") {
      req.socket.resetAndDestroy();
      return;
    }
    if (action === "unavailable") {
      record.status = 503;
      res.writeHead(503, { "Content-Type": "application/problem+json", "Retry-After": "1" });
      res.end(
        JSON.stringify({
          type: "urn:onejob:unavailable",
          title: "Unavailable",
          status: 503,
          detail: "The database is not reachable (injected by the test).",
          outcome: "not_done",
        }),
      );
      return;
    }
    const headers = {};
    for (const [name, value] of Object.entries(req.headers)) {
      if (!HOP_BY_HOP.has(name)) headers[name] = value;
    }
    let upstream;
    try {
      upstream = await fetch(target + req.url, {
        method: req.method,
        headers,
        body: body.length ? body : undefined,
      });
    } catch (error) {
      res.writeHead(502);
      res.end(String(error));
      return;
    }
    if (action === "reset_after") {
      await upstream.arrayBuffer();
      req.socket.resetAndDestroy();
      return;
    }
    record.status = upstream.status;
    const out = {};
    upstream.headers.forEach((value, name) => {
      if (!HOP_BY_HOP.has(name)) out[name] = value;
    });
    res.writeHead(upstream.status, out);
    let relayed = "";
    const text = new TextDecoder();
    if (upstream.body) {
      for await (const chunk of upstream.body) {
        res.write(chunk);
        if (action !== "cut_stream") continue;
        relayed += text.decode(chunk, { stream: true });
        if (FIRST_EVENT_WITH_ID.test(relayed.replace(/\r\n?/g, "\n"))) {
          await new Promise((resolve) => res.write("", resolve)); // flushed
          // A reset at once can discard bytes the client's kernel has not handed over yet:
          // give it CUT_GRACE_MS to read the event it is to resume after, then cut.
          await new Promise((resolve) => setTimeout(resolve, CUT_GRACE_MS));
          req.socket.resetAndDestroy();
          return;
        }
      }
    }
    res.end();
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    seen,
    script(method, path, ...actions) {
      const route = `${method} ${path}`;
      scripts.set(route, [...(scripts.get(route) ?? []), ...actions]);
    },
    unavailableFor(ms) {
      unavailableUntil = Date.now() + ms;
    },
    requests(method, path) {
      return seen.filter((s) => s.method === method && s.path === path);
    },
    close() {
      server.closeAllConnections?.();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}
