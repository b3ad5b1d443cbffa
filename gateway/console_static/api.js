// The only place that talks to the gateway. The key lives in sessionStorage (this tab only)
// and travels in the Authorization header; never in a URL, a cookie or a log line.

const STORAGE_KEY = "onejob.console.key";

export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {};
  }
}

export function storedKey() {
  return sessionStorage.getItem(STORAGE_KEY);
}

export function rememberKey(key) {
  sessionStorage.setItem(STORAGE_KEY, key);
}

export function forgetKey() {
  sessionStorage.removeItem(STORAGE_KEY);
}

let onUnauthorized = () => {};

/** Set what happens when the gateway says the key is no longer valid (401). */
export function whenUnauthorized(handler) {
  onUnauthorized = handler;
}

/** Call the API with the stored key (or `key`); return the parsed JSON body. */
export async function api(path, { method = "GET", body, key } = {}) {
  const token = key || storedKey();
  // Says who asks, so the access log can keep the console's polling at DEBUG.
  const headers = { Accept: "application/json", "X-Onejob-Client": "console" };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit", // no cookies either way
    cache: "no-store",
    referrerPolicy: "no-referrer",
  });
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { detail: text.slice(0, 200) };
  }
  if (!response.ok) {
    if (response.status === 401 && !key) onUnauthorized();
    throw new ApiError(response.status, data);
  }
  return data;
}

/** Ask whose key this is: {owner, scopes}. */
export function me(key) {
  return api("/v1/me", { key });
}

/** Say what went wrong in one line (a problem's detail and its errors list). */
export function describe(error) {
  if (error instanceof ApiError) {
    const errors = Array.isArray(error.problem.errors) ? ` (${error.problem.errors.join("; ")})` : "";
    return `${error.status}: ${error.message}${errors}`;
  }
  return String(error && error.message ? error.message : error);
}
