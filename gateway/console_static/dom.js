// Build DOM nodes from text only: every value from the API becomes a text node, never markup.

const SVG_NS = "http://www.w3.org/2000/svg";

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function setAttrs(node, attrs) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      node.addEventListener(name.slice(2), value);
    } else if (name === "dataset") {
      Object.assign(node.dataset, value);
    } else {
      node.setAttribute(name, value === true ? "" : String(value));
    }
  }
  return node;
}

/** Create an HTML element: h("a", {href: "#/jobs"}, "Jobs"). */
export function h(tag, attrs, ...children) {
  return append(setAttrs(document.createElement(tag), attrs), children);
}

/** Create an SVG element. */
export function s(tag, attrs, ...children) {
  return append(setAttrs(document.createElementNS(SVG_NS, tag), attrs), children);
}

/** Replace the children of `node`. */
export function fill(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

/** A table cell that carries its column name, for the narrow-screen card layout. */
export function td(label, ...children) {
  // One wrapper, so the narrow layout's grid has exactly two items: the label and this.
  return h("td", { "data-label": label }, h("div", { class: "cell" }, ...children));
}

/** A status or state word as a coloured badge (the word stays readable without colour). */
export function badge(word, kind) {
  return h("span", { class: `badge ${kind || word}` }, word);
}

/** Render an RFC 3339 time as "2026-11-30 07:17:33Z", or an en dash. */
export function when(text) {
  if (!text) return "–";
  return text.replace("T", " ").replace(/\.\d+Z$/, "Z");
}

/** A time as `when` writes it, which may break between its date and its clock but never
 * inside either (not at a date's hyphens). */
export function stamp(text) {
  const [date, clock] = when(text).split(" ");
  return h("span", { class: "stamp" }, h("span", {}, date), clock ? [" ", h("span", {}, clock)] : null);
}

/** JSON with a space after each comma and colon, so a narrow cell breaks it between
 * members instead of inside a word. */
export function spacedJSON(value) {
  // Pretty-printed JSON has line breaks only between tokens (a string's are escaped).
  return JSON.stringify(value, null, 1).replace(/\n\s*/g, " ");
}

/** Say how long ago (or, if in the future, in how long) `text` is from `now`. */
export function age(text, now = Date.now()) {
  if (!text) return "–";
  const ms = now - Date.parse(text);
  const future = ms < 0;
  let secs = Math.round(Math.abs(ms) / 1000);
  const parts = [];
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60]]) {
    if (secs >= size) {
      parts.push(`${Math.floor(secs / size)}${unit}`);
      secs %= size;
    }
  }
  if (parts.length < 2) parts.push(`${secs}s`);
  const span = parts.slice(0, 2).join(" ");
  return future ? `in ${span}` : `${span} ago`;
}

/** Pretty JSON for a <pre>. */
export function json(value) {
  return h("pre", { class: "json" }, JSON.stringify(value, null, 2));
}

/**
 * Re-render part of a view without losing keyboard focus: the element that had focus is
 * found again by its `data-focus-key` after `render()` replaced it.
 */
export function keepingFocus(region, render) {
  const active = document.activeElement;
  const key = active && region.contains(active) ? active.dataset.focusKey : undefined;
  render();
  if (key) {
    const again = region.querySelector(`[data-focus-key="${CSS.escape(key)}"]`);
    if (again) again.focus();
  }
}

/** Call `fn` every `ms` milliseconds while the tab is visible; return a stop function. */
export function every(ms, fn) {
  let busy = false;
  const timer = setInterval(async () => {
    if (busy || document.hidden) return;
    busy = true;
    try {
      await fn();
    } finally {
      busy = false;
    }
  }, ms);
  return () => clearInterval(timer);
}
