// A job's timeline as SVG, drawn in the browser in the style of reports/timeline_svg.py:
// one lane per attempt (plus one for the job), marks for sent, waiting, unknown, won, lost,
// failed.

import { clock, whyWaiting, words } from "./capacity.js";
import { s } from "./dom.js";

const MAX_WIDTH = 1920; // px: the drawing is as wide as its frame, within these bounds
const MIN_WIDTH = 340; // px: narrower frames scroll sideways rather than shrink the text
const LABEL_WIDTH = 210; // px, lane names on the left (125 when narrow)
const LANE_HEIGHT = 28; // px
const TOP = 30; // px above the first lane, for the time axis
const LEGEND_HEIGHT = 34; // px below the last lane
const RIGHT_PAD = 75; // px, so end labels stay inside
const MIN_SPAN = 0.001; // s: a job whose marks all fall in one millisecond is drawn over one

export const COLOURS = {
  won: "#2e9d4d",
  lost: "#e08a1e",
  timed_out: "#8e44ad",
  failed: "#c0392b",
  cancelled: "#7f8c8d",
  waiting: "#1f6fa8",
};
const RUNNING = "#9fb6cd";
const END_LABELS = { won: "won", lost: "lost", timed_out: "unknown", failed: "failed", cancelled: "cancelled", waiting: "waiting" };
const LEGEND = [
  ["created", "created"],
  ["sent", "sent"],
  ["waiting", "waiting"],
  ["won", "won"],
  ["lost", "lost"],
  ["timed_out", "unknown"],
  ["failed", "failed"],
  ["cancelled", "cancelled"],
  ["action", "job event"],
];

/** Which mark an audit event draws, or null for events without one. */
export function markOf(event) {
  const d = event.detail || {};
  switch (event.kind) {
    case "attempt_created": return "created";
    case "attempt_running": return "sent";
    case "attempt_waiting": return "waiting";
    case "attempt_succeeded": return "won";
    case "race_lost": return "lost";
    case "attempt_unknown": return "timed_out";
    case "attempt_failed": return "failed";
    case "attempt_cancelled": return "cancelled";
    case "attempt_resolved":
      if (d.outcome === "succeeded") return d.won === false ? "lost" : "won";
      return d.outcome === "failed" ? "failed" : "cancelled";
    case "job_cancelled": return "cancelled";
    case "job_failed": return "failed";
    default: return "action";
  }
}

const JOB_LEVEL = new Set(["job_created", "replayed", "conflict", "attempt_refused", "cancel_refused", "job_reopened", "job_cancelled", "job_failed"]);

/** Turn a job and its events into lanes of marks (times in seconds from the first event). */
export function lanesOf(job, events) {
  const byId = new Map(job.attempts.map((a) => [a.id, a]));
  const laneName = (a) => `attempt ${a.number} · ${a.provider}`;
  const lanes = new Map([["job", []]]);
  for (const a of [...job.attempts].sort((x, y) => x.number - y.number)) lanes.set(laneName(a), []);
  const start = events.length ? Date.parse(events[0].at) : 0;
  for (const event of events) {
    const attempt = byId.get(event.attempt_id);
    const lane = !attempt || JOB_LEVEL.has(event.kind) ? "job" : laneName(attempt);
    lanes.get(lane).push({ at: (Date.parse(event.at) - start) / 1000, kind: markOf(event), label: labelOf(event, attempt) });
  }
  return lanes;
}

/** What a mark's tooltip and the timeline's summary say of an event. */
function labelOf(event, attempt) {
  const d = event.detail || {};
  switch (event.kind) {
    case "attempt_resolved": return `resolved ${d.outcome}${d.note ? `: ${d.note}` : ""}`;
    case "attempt_waiting": return `waiting: ${whyWaiting(d.capacity || d.reason, attempt ? attempt.provider : "the provider")} until ${clock(d.until)}`;
    case "attempt_cancelled": return d.why ? `attempt_cancelled (${words(d.why)})` : event.kind;
    case "attempt_failed":
    case "job_failed": return d.reason === "job_deadline" ? `${event.kind} (job deadline)` : event.kind;
    default: return event.kind;
  }
}

/** How an attempt's bar ends: its last outcome, or waiting while it waits (a wait followed
 * by a new send is not an end). */
function endOf(marks) {
  const last = marks[marks.length - 1];
  if (last && last.kind === "waiting") return last;
  return [...marks].reverse().find((m) => m.kind in COLOURS && m.kind !== "waiting");
}

/** Say `seconds` in the drawing's unit: milliseconds when the whole job took under a second. */
function timeText(seconds, unit) {
  return unit === "ms" ? `${Number((seconds * 1000).toFixed(1))}ms` : `${Number(seconds.toFixed(3))}s`;
}

/**
 * Choose the time axis from how long the job took (its last mark, `end` seconds in): the
 * span the plot covers, the step between ticks and their unit. A job done in 40 ms is
 * drawn over 40 ms in ms, not squeezed into the first tick of a one-second axis.
 */
export function timeScale(end, ticks) {
  const span = end > 0 ? end : MIN_SPAN;
  return { span, step: niceStep(span, ticks), unit: span < 1 ? "ms" : "s" };
}

function niceStep(span, ticks) {
  const raw = span > 0 ? span / ticks : 1;
  const power = 10 ** Math.floor(Math.log10(raw));
  for (const factor of [1, 2, 5, 10]) if (raw <= factor * power) return factor * power;
  return 10 * power;
}

function glyph(kind, x, y) {
  const c = COLOURS[kind];
  switch (kind) {
    case "sent": return s("circle", { cx: x, cy: y, r: 5, fill: "#fff", stroke: "#222", "stroke-width": 2 });
    case "won": {
      const pts = [];
      for (let i = 0; i < 10; i++) {
        const r = i % 2 === 0 ? 8 : 3.5;
        const a = (i * Math.PI) / 5;
        pts.push(`${(x + r * Math.sin(a)).toFixed(1)},${(y - r * Math.cos(a)).toFixed(1)}`);
      }
      return s("polygon", { points: pts.join(" "), fill: c, stroke: "#145a2a" });
    }
    case "lost": return s("path", { d: `M${x - 6},${y - 6} L${x + 6},${y + 6} M${x - 6},${y + 6} L${x + 6},${y - 6}`, stroke: c, "stroke-width": 3 });
    case "timed_out": return s("polygon", { points: `${x},${y - 7} ${x + 7},${y} ${x},${y + 7} ${x - 7},${y}`, fill: c });
    case "failed": return s("rect", { x: x - 5, y: y - 5, width: 10, height: 10, fill: c });
    case "cancelled": return s("line", { x1: x - 6, y1: y + 6, x2: x + 6, y2: y - 6, stroke: c, "stroke-width": 3 });
    case "waiting": return s("path", { d: `M${x - 5},${y - 7} L${x + 5},${y - 7} L${x - 5},${y + 7} L${x + 5},${y + 7} Z`, fill: c, stroke: c, "stroke-linejoin": "round" }); // an hourglass
    case "action": return s("polygon", { points: `${x - 5},${y - 7} ${x + 5},${y - 7} ${x},${y + 2}`, fill: "#34495e" });
    default: return s("circle", { cx: x, cy: y, r: 3, fill: "#95a5a6" });
  }
}

/** Place the legend's entries left to right, wrapping to a new row at the edge. */
function legendLayout(width) {
  const placed = [];
  let x = 12;
  let row = 0;
  for (const [kind, text] of LEGEND) {
    const w = 24 + 6.8 * text.length;
    if (x + w > width - 8 && x > 12) {
      x = 12;
      row += 1;
    }
    placed.push({ kind, text, x, row });
    x += w;
  }
  return placed;
}

/** Return the <svg> timeline of a job, drawn for a frame `frameWidth` pixels wide. */
export function renderTimeline(job, events, frameWidth = MAX_WIDTH) {
  const width = Math.round(Math.max(MIN_WIDTH, Math.min(MAX_WIDTH, frameWidth)));
  const labelWidth = width < 700 ? 125 : LABEL_WIDTH;
  const lanes = lanesOf(job, events);
  const names = [...lanes.keys()];
  const legendAt = legendLayout(width);
  const legendRows = legendAt.length ? legendAt[legendAt.length - 1].row + 1 : 1;
  const height = TOP + names.length * LANE_HEIGHT + LEGEND_HEIGHT + (legendRows - 1) * 18;
  const summary = names
    .filter((n) => n !== "job")
    .map((n) => `${n}: ${lanes.get(n).map((m) => m.label).join(", ") || "no events"}`)
    .join("; ");
  const svg = s(
    "svg",
    { class: "timeline", role: "img", width, height, viewBox: `0 0 ${width} ${height}`, "font-family": "sans-serif", "font-size": 12, "aria-label": `Timeline of ${job.id}. ${summary}` },
    s("title", {}, `Timeline of ${job.id}`),
    s("rect", { width, height, fill: "#fcfcfc" }),
  );
  const all = [...lanes.values()].flat();
  const end = all.length ? Math.max(...all.map((m) => m.at)) : 0;
  const plot = width - labelWidth - RIGHT_PAD;
  const { span, step, unit } = timeScale(end, Math.max(3, Math.floor(plot / 90)));
  const xOf = (t) => labelWidth + 10 + (t / span) * (plot - 10);
  for (let n = 0; n * step <= span * (1 + 1e-9); n++) {
    const tick = n * step; // counted, not summed: 0.1 + 0.2 must not drift past the end
    const x = xOf(tick);
    svg.append(
      s("line", { x1: x, y1: TOP - 6, x2: x, y2: TOP + names.length * LANE_HEIGHT, stroke: "#e4e4e4" }),
      s("text", { class: "tick", x, y: TOP - 10, "text-anchor": "middle", fill: "#555" }, timeText(tick, unit)),
    );
  }
  names.forEach((name, index) => {
    const y = TOP + index * LANE_HEIGHT + LANE_HEIGHT / 2;
    const marks = lanes.get(name);
    const kind = name === "job" ? "job" : "attempt";
    const g = s("g", { class: `lane lane-${kind}`, "data-lane": name });
    if (index % 2 === 0) g.append(s("rect", { x: 0, y: y - LANE_HEIGHT / 2, width, height: LANE_HEIGHT, fill: "#f3f5f8" }));
    g.append(s("text", { x: 8, y: y + 4, fill: "#222" }, width < 700 && name.length > 18 ? `${name.slice(0, 17)}…` : name.slice(0, 34)));
    if (kind === "attempt" && marks.length) {
      const outcome = endOf(marks);
      const colour = outcome ? COLOURS[outcome.kind] : RUNNING;
      const x1 = xOf(marks[0].at);
      const x2 = Math.max(xOf(marks[marks.length - 1].at), x1 + 2);
      g.append(s("rect", { class: "bar", x: x1, y: y - 4, width: x2 - x1, height: 8, rx: 3, fill: colour, opacity: 0.55 }));
      if (outcome) g.append(s("text", { class: "end-label", x: x2 + 12, y: y + 4, fill: colour, "font-weight": "bold" }, END_LABELS[outcome.kind]));
    }
    for (const mark of marks) {
      g.append(s("g", { class: `mark mark-${mark.kind}` }, s("title", {}, `${timeText(mark.at, unit)} ${mark.label}`), glyph(mark.kind, xOf(mark.at), y)));
    }
    svg.append(g);
  });
  const legend = s("g", { class: "legend" });
  const ly = TOP + names.length * LANE_HEIGHT + LEGEND_HEIGHT / 2;
  for (const { kind, text, x, row } of legendAt) {
    const y = ly + row * 18;
    legend.append(glyph(kind, x + 6, y), s("text", { x: x + 16, y: y + 4, fill: "#333" }, text));
  }
  svg.append(legend);
  return svg;
}
