// The /schema page: Redoc (vendored, redoc.standalone.js) drawing this gateway's OpenAPI
// document. An external module, so the page's CSP needs no inline script; system fonts,
// so nothing is fetched from another origin.
/* global Redoc */
const SYSTEM_FONTS = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
Redoc.init(
  "/schema/openapi.json",
  {
    expandResponses: "200,201",
    theme: {
      typography: {
        fontFamily: SYSTEM_FONTS,
        headings: { fontFamily: SYSTEM_FONTS },
        code: { fontFamily: "ui-monospace, 'DejaVu Sans Mono', Menlo, monospace" },
      },
    },
  },
  document.getElementById("redoc"),
);
