// Webhooks: the caller's subscriptions, and one subscription's deliveries with their last
// outcome (status, tries, the endpoint's answer or the error, the next try), newest first a
// page at a time (cursor paging, as the jobs), each of which may be sent again.

import { api, describe } from "./api.js";
import { badge, every, fill, h, keepingFocus, stamp, td } from "./dom.js";

const REFRESH_MS = 3000;
const PAGE_SIZE = 20;

export async function renderWebhooks(view) {
  const region = h("div", { id: "webhooks-region" });
  const message = h("p", { class: "error", role: "alert" });
  fill(view, h("h1", {}, "Webhooks"), message, region);

  async function load() {
    let page;
    try {
      page = await api("/v1/webhooks");
      message.textContent = "";
    } catch (error) {
      message.textContent = describe(error);
      return;
    }
    keepingFocus(region, () => fill(region, webhooksTable(page.webhooks)));
  }
  await load();
  return every(REFRESH_MS, load);
}

function state(hook) {
  return hook.disabled_at ? badge(`disabled: ${hook.disabled_reason || "?"}`, "failed") : badge("active", "succeeded");
}

function webhooksTable(hooks) {
  if (!hooks.length) return h("p", { class: "notice" }, "No webhooks. Make one with POST /v1/webhooks.");
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: "cards", id: "webhooks-table" },
      h("thead", {}, h("tr", {}, ["Webhook", "URL", "Events", "State", "Created"].map((c) => h("th", { scope: "col" }, c)))),
      h(
        "tbody",
        {},
        hooks.map((hook) =>
          h(
            "tr",
            { "data-webhook": hook.id },
            td("Webhook", h("a", { href: `#/webhooks/${encodeURIComponent(hook.id)}`, class: "mono id", "data-focus-key": hook.id }, hook.id)),
            td("URL", h("span", { class: "mono breakable" }, hook.url)),
            td("Events", hook.events.join(", "), hook.all_owners ? " (every owner)" : ""),
            td("State", state(hook)),
            td("Created", stamp(hook.created_at)),
          ),
        ),
      ),
    ),
  );
}

export async function renderDeliveries(view, _ctx, webhookId) {
  const region = h("div", { id: "deliveries-region" });
  const message = h("p", { class: "error", role: "alert" });
  const said = h("p", { class: "notice", role: "status", hidden: true });
  const newer = h("button", { type: "button", id: "newer-deliveries", "data-focus-key": "newer" }, "← Newer");
  const older = h("button", { type: "button", id: "older-deliveries", "data-focus-key": "older" }, "Older →");
  const pageNo = h("span", { class: "muted", "aria-live": "polite" });
  fill(
    view,
    h("h1", {}, "Webhook ", h("span", { class: "mono breakable" }, webhookId)),
    h("p", {}, h("a", { href: "#/webhooks" }, "← Webhooks")),
    message,
    said,
    region,
    h("div", { class: "pager" }, newer, older, pageNo),
  );
  const base = `/v1/webhooks/${encodeURIComponent(webhookId)}`;
  // The cursor of each page shown so far (null: the newest), the last one's on screen.
  const cursors = [null];
  let nextCursor = null;

  async function again(delivery) {
    try {
      await api(`${base}/deliveries/${encodeURIComponent(delivery.id)}/redeliver`, { method: "POST" });
      said.textContent = `Delivery ${delivery.id} will be sent again now, with the same webhook-id.`;
    } catch (error) {
      said.textContent = describe(error);
    }
    said.hidden = false;
    await load();
  }

  async function load() {
    const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
    const cursor = cursors[cursors.length - 1];
    if (cursor) query.set("cursor", cursor);
    let page;
    try {
      page = await api(`${base}/deliveries?${query}`);
      message.textContent = "";
    } catch (error) {
      message.textContent = describe(error);
      return;
    }
    nextCursor = page.next_cursor;
    keepingFocus(region, () => fill(region, deliveriesTable(page.deliveries, again)));
    newer.disabled = cursors.length < 2;
    older.disabled = !nextCursor;
    pageNo.textContent = `Page ${cursors.length}`;
  }

  older.addEventListener("click", () => {
    if (!nextCursor) return;
    cursors.push(nextCursor);
    load();
  });
  newer.addEventListener("click", () => {
    if (cursors.length < 2) return;
    cursors.pop();
    load();
  });
  await load();
  return every(REFRESH_MS, load);
}

function outcome(delivery) {
  if (delivery.last_status !== null) return `HTTP ${delivery.last_status}`;
  return delivery.last_error ? h("span", { class: "breakable" }, delivery.last_error) : "–";
}

function deliveriesTable(deliveries, again) {
  if (!deliveries.length) return h("p", { class: "notice" }, "Nothing was sent to this webhook yet.");
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: "cards", id: "deliveries-table" },
      h("thead", {}, h("tr", {}, ["Delivery (webhook-id)", "Event", "Job", "Status", "Tries", "Last answer", "Next try", "Delivered", ""].map((c) => h("th", { scope: "col" }, c)))),
      h(
        "tbody",
        {},
        deliveries.map((d) =>
          h(
            "tr",
            { "data-delivery": d.id },
            td("Delivery", h("span", { class: "mono breakable" }, d.id)),
            td("Event", d.type),
            td("Job", d.job_id ? h("a", { href: `#/jobs/${encodeURIComponent(d.job_id)}`, class: "mono id" }, d.job_id) : "–"),
            td("Status", badge(d.status, d.status === "delivered" ? "succeeded" : d.status === "failed" ? "failed" : "queued")),
            td("Tries", String(d.tries)),
            td("Last answer", outcome(d)),
            td("Next try", d.status === "pending" ? stamp(d.next_at) : "–"),
            td("Delivered", stamp(d.delivered_at)),
            td("", h("button", { type: "button", "data-focus-key": `again-${d.id}`, "aria-label": `Send delivery ${d.id} again`, onclick: () => again(d) }, "Send again")),
          ),
        ),
      ),
    ),
  );
}
