// The console's entry module: sign-in, navigation, and a hash router over the views.

import { ApiError, describe, forgetKey, me, rememberKey, storedKey, whenUnauthorized } from "./api.js";
import { fill, h } from "./dom.js";
import { renderJob } from "./job.js";
import { renderJobs } from "./jobs.js";
import { renderCertificate, renderMatrix } from "./matrix.js";
import { renderUnknown } from "./unknown.js";
import { renderDeliveries, renderWebhooks } from "./webhooks.js";

const ADMIN_SCOPE = "admin";

/** Views by the first segment of the hash; `admin` ones need the admin scope. */
const ROUTES = {
  jobs: { title: (rest) => (rest.length ? `Job ${rest[0]}` : "Recent jobs"), render: (view, ctx, rest) => rest.length ? renderJob(view, ctx, rest[0]) : renderJobs(view, ctx) },
  matrix: { title: "Failover matrix", render: renderMatrix },
  certificate: { title: (rest) => (rest.length > 1 ? `Certificate: ${rest[1]} on ${rest[0]}` : "Certificate"), render: (view, ctx, rest) => renderCertificate(view, ctx, rest[0], rest[1]) },
  unknown: { title: "Unknown attempts", render: renderUnknown, admin: true },
  webhooks: { title: (rest) => (rest.length ? `Webhook ${rest[0]}` : "Webhooks"), render: (view, ctx, rest) => rest.length ? renderDeliveries(view, ctx, rest[0]) : renderWebhooks(view, ctx) },
};
const NAV = [
  ["jobs", "Recent jobs"],
  ["matrix", "Failover matrix"],
  ["unknown", "Unknown attempts"],
  ["webhooks", "Webhooks"],
];

const state = { who: null, stop: null };

function isAdmin() {
  return Boolean(state.who && state.who.scopes.includes(ADMIN_SCOPE));
}

function parseHash() {
  const hash = location.hash.startsWith("#/") ? location.hash.slice(2) : "";
  const [path] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { name: parts[0] || "jobs", rest: parts.slice(1) };
}

function renderNav(current) {
  const nav = document.getElementById("nav");
  // Admin links are not rendered at all for other keys (not merely hidden).
  const links = NAV.filter(([name]) => !ROUTES[name].admin || isAdmin()).map(([name, text]) =>
    h("a", { href: `#/${name}`, "aria-current": name === current ? "page" : null }, text),
  );
  fill(nav, links);
  const who = document.getElementById("who");
  fill(
    who,
    h("span", { id: "who-owner" }, "Signed in as ", h("strong", {}, state.who.owner)),
    state.who.scopes.map((scope) => h("span", { class: "scope" }, scope)),
    h("button", { type: "button", id: "sign-out", onclick: signOut }, "Sign out"),
  );
}

async function route() {
  if (!state.who) return;
  if (state.stop) {
    state.stop();
    state.stop = null;
  }
  const { name, rest } = parseHash();
  const spec = ROUTES[name] || ROUTES.jobs;
  renderNav(name);
  const view = document.getElementById("view");
  const title = typeof spec.title === "function" ? spec.title(rest) : spec.title;
  document.title = `${title} · onejob console`;
  if (spec.admin && !isAdmin()) {
    fill(
      view,
      h("h1", { tabindex: "-1" }, title),
      h("p", { class: "notice warn", role: "status" }, "This view needs an API key with the admin scope."),
    );
    focusHeading(view);
    return;
  }
  const ctx = { isAdmin: isAdmin(), who: state.who };
  try {
    state.stop = (await spec.render(view, ctx, rest)) || null;
  } catch (error) {
    fill(view, h("h1", { tabindex: "-1" }, title), h("p", { class: "error", role: "alert" }, describe(error)));
  }
  focusHeading(view);
}

/** Move focus to the new view's heading, so keyboard and screen-reader users land there. */
function focusHeading(view, always = false) {
  const from = document.activeElement;
  if (always || (from && from.closest("#nav, .brand, #view"))) {
    const heading = view.querySelector("h1");
    if (heading) {
      heading.setAttribute("tabindex", "-1");
      heading.focus({ preventScroll: false });
    }
  }
}

function showSignIn(message) {
  state.who = null;
  if (state.stop) state.stop();
  state.stop = null;
  fill(document.getElementById("nav"));
  fill(document.getElementById("who"));
  fill(document.getElementById("view"));
  document.getElementById("sign-in").hidden = false;
  document.getElementById("sign-in-error").textContent = message || "";
  document.title = "Sign in · onejob console";
  document.getElementById("api-key").focus();
}

function signOut() {
  forgetKey();
  showSignIn("Signed out.");
}

async function signIn(event) {
  event.preventDefault();
  const input = document.getElementById("api-key");
  const error = document.getElementById("sign-in-error");
  const key = input.value.trim();
  if (!key) {
    error.textContent = "Enter an API key.";
    input.focus();
    return;
  }
  error.textContent = "";
  try {
    state.who = await me(key);
  } catch (e) {
    error.textContent = e instanceof ApiError && e.status === 401 ? "That key is not valid or was revoked." : describe(e);
    input.select();
    return;
  }
  rememberKey(key);
  input.value = "";
  document.getElementById("sign-in").hidden = true;
  if (!location.hash.startsWith("#/")) location.hash = "#/jobs";
  await route();
  focusHeading(document.getElementById("view"), true);
}

async function boot() {
  whenUnauthorized(() => {
    forgetKey();
    showSignIn("The key is no longer valid; sign in again.");
  });
  document.getElementById("sign-in-form").addEventListener("submit", signIn);
  window.addEventListener("hashchange", route);
  const key = storedKey();
  if (!key) {
    showSignIn();
    return;
  }
  try {
    state.who = await me(key);
  } catch {
    forgetKey();
    showSignIn("Sign in again.");
    return;
  }
  document.getElementById("sign-in").hidden = true;
  await route();
}

boot();
