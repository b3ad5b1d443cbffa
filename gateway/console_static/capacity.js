// A provider's "not now" in words (issue 43): why a job waits and until when, what a
// provider's circuit and pause are, and the failures a job's deadline ends with. Shared by
// the recent jobs, the job page, its timeline and the failover matrix.

import { badge, h } from "./dom.js";

/**
 * A time of day as "12:00:05Z" (UTC, as every time in the console), with its date in front
 * when it is not today's: "2026-12-08 12:00:05Z".
 */
export function clock(text, now = Date.now()) {
  if (!text) return "–";
  const at = new Date(text);
  if (Number.isNaN(at.getTime())) return String(text);
  const iso = at.toISOString();
  const time = `${iso.slice(11, 19)}Z`;
  return iso.slice(0, 10) === new Date(now).toISOString().slice(0, 10) ? time : `${iso.slice(0, 10)} ${time}`;
}

/** A reason word as people read it: "rate_limited" → "rate limited". */
export function words(reason) {
  return String(reason || "not now").replaceAll("_", " ");
}

/** Why an attempt waits, with its provider: "rate limited by sim-openai", "circuit open for sim-openai". */
export function whyWaiting(reason, provider) {
  switch (reason) {
    case "rate_limited": return `rate limited by ${provider}`;
    case "overloaded": return `${provider} overloaded`;
    case "paced": return `paced to ${provider}'s rate limit`;
    case "paused": return `${provider} asked for a pause`;
    case "circuit_open": return `circuit open for ${provider}`;
    case "concurrency": return `${provider} at its concurrency limit`;
    default: return `${words(reason)} (${provider})`;
  }
}

/** "1 wait", "3 waits". */
export function waitCount(n) {
  return `${n} wait${n === 1 ? "" : "s"}`;
}

/** A job waiting for capacity, in one line: "waiting for sim-openai until 12:00:05Z (rate limited)". */
export function waitingLine(waiting) {
  return `waiting for ${waiting.provider} until ${clock(waiting.until)} (${words(waiting.reason)})`;
}

/**
 * An attempt's or a job's error in words, when onejob knows the reason well enough to
 * say it better than its JSON (null otherwise): a job deadline (`deadlineAt`, the job's,
 * when the error does not carry it) that came first, an attempt superseded by a manual
 * one, a provider's "not now".
 */
export function errorWords(error, provider, deadlineAt) {
  if (!error || typeof error !== "object") return null;
  if (error.reason === "job_deadline") {
    const at = error.deadline_at || deadlineAt;
    const when = at ? ` (${clock(at)})` : "";
    return `The job's deadline${when} came first: ${error.message || "nothing more was sent"}.`;
  }
  if (error.reason === "superseded") return "Superseded by a manual attempt before it was sent again.";
  if (error.capacity) {
    const status = error.status_code ? `${error.status_code} ` : "";
    const asked = typeof error.retry_after_s === "number" ? `, asked to wait ${error.retry_after_s} s` : "";
    return `${status}${whyWaiting(error.capacity, provider || "the provider")}${asked}.`;
  }
  return null;
}

/** An `attempt_waiting` event in words: "rate limited by sim-openai (429): not sent again before 12:00:05Z; wait 1, asked for 30 s". */
export function waitingEventWords(detail, provider) {
  const d = detail || {};
  const status = d.status_code ? ` (${d.status_code})` : "";
  const asked = typeof d.retry_after_s === "number" ? `, asked for ${d.retry_after_s} s` : "";
  const count = typeof d.waits === "number" ? `; wait ${d.waits}${asked}` : "";
  return `${whyWaiting(d.capacity || d.reason, provider || "the provider")}${status}: not sent again before ${clock(d.until)}${count}`;
}

function perMinute(n, unit) {
  return `${Math.round(n).toLocaleString("en")} ${unit}/min`;
}

/**
 * A provider's capacity as the gateway sees it (a row of GET /v1/providers): badges for an
 * open or half-open circuit and a pause, then the pace it keeps to and its queue. A
 * closed circuit with no pause, no known limit and nothing queued says nothing (null).
 */
export function providerCapacity(p, now = Date.now()) {
  const open = p.circuit === "open";
  const half = p.circuit === "half_open";
  const paused = Boolean(p.paused_until);
  const paced = typeof p.pace_requests_per_minute === "number" || typeof p.pace_tokens_per_minute === "number";
  if (!open && !half && !paused && !paced && !p.queued && !p.waiting) return null;
  const badges = [];
  if (open) {
    const due = p.circuit_until && Date.parse(p.circuit_until) <= now;
    badges.push(badge(due ? "circuit open: a probe may go now" : `circuit open until ${clock(p.circuit_until, now)}`, "circuit-open"));
  }
  if (half) badges.push(badge("half open: probing", "half-open"));
  if (paused) badges.push(badge(`paused until ${clock(p.paused_until, now)} (${words(p.pause_reason)})`, "paused"));
  const facts = [];
  if (open && p.consecutive_failures) facts.push(`${p.consecutive_failures} failure${p.consecutive_failures === 1 ? "" : "s"} in a row`);
  if (paced) {
    const pace = [];
    if (typeof p.pace_requests_per_minute === "number") pace.push(perMinute(p.pace_requests_per_minute, "requests"));
    if (typeof p.pace_tokens_per_minute === "number") pace.push(perMinute(p.pace_tokens_per_minute, "tokens"));
    const share = typeof p.share === "number" && p.share < 1 ? ` (this process's ${Math.round(p.share * 100)}% share)` : "";
    facts.push(`paced to ${pace.join(", ")}${share}; ${p.in_flight} in flight`);
  }
  const queue = [p.waiting ? `${p.waiting} waiting` : null, p.queued ? `${p.queued} queued` : null].filter(Boolean);
  if (queue.length) facts.push(queue.join(", "));
  return h(
    "div",
    { class: "capacity", "data-provider": p.name, "data-circuit": p.circuit, "data-paused": String(paused) },
    h("span", { class: "provider-name" }, p.name),
    ": ",
    badges.map((b, i) => [i ? " " : "", b]),
    facts.length ? [badges.length ? " " : "", h("span", { class: "capacity-facts" }, facts.join("; "))] : null,
  );
}
