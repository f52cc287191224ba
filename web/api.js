// The dashboard's only way to the server: fetch with the session cookie,
// the CSRF token on every request that is not a GET, and one error shape.
//
// The session token itself is an HttpOnly cookie that scripts never see;
// the CSRF token lives only in this module's memory (never in storage), so
// a reload asks GET /v1/whoami for it again.

let csrf = "";
let onUnauthorized = null;

export class ApiError extends Error {
  // status: the HTTP status (0 when the server could not be reached);
  // code: the error code from {"error": {"code", "message"}}.
  constructor(status, code, message, body) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

export function setCsrf(value) {
  csrf = typeof value === "string" ? value : "";
}

// fn(error) is called when a request of a signed-in page is answered 401.
export function setUnauthorizedHandler(fn) {
  onUnauthorized = fn;
}

export function isAbort(e) {
  return e != null && e.name === "AbortError";
}

// How long a request may take before the page says the server did not
// answer (a long poll asks for more with opts.timeoutMs). Without it a
// connection that never answers would leave the page waiting for good.
const REQUEST_TIMEOUT_MS = 60000;

// The caller's signal (a page leaving) and the request's own deadline.
function deadlineSignal(signal, ms) {
  const deadline = AbortSignal.timeout(ms);
  if (!signal) return deadline;
  if (typeof AbortSignal.any === "function") return AbortSignal.any([signal, deadline]);
  return signal; // an older browser: the page's own signal only
}

// request("GET", "/v1/nodes") -> the parsed JSON answer, or throws ApiError.
// opts: {body (an object, sent as JSON), text and type (a body sent as is,
// with that Content-Type), signal, timeoutMs, noAuthRedirect}.
export async function request(method, path, opts = {}) {
  const headers = { Accept: "application/json" };
  const init = { method, credentials: "same-origin", headers, cache: "no-store" };
  if (method !== "GET" && method !== "HEAD" && csrf) headers["X-CSRF-Token"] = csrf;
  if (opts.body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(opts.body);
  } else if (opts.text !== undefined) {
    headers["Content-Type"] = opts.type;
    init.body = opts.text;
  }
  const timeoutMs = opts.timeoutMs || REQUEST_TIMEOUT_MS;
  init.signal = deadlineSignal(opts.signal, timeoutMs);

  let resp, text;
  try {
    resp = await fetch(path, init);
    text = await resp.text();
  } catch (e) {
    if (e && e.name === "TimeoutError") {
      throw new ApiError(0, "TIMEOUT", "the server did not answer within " + Math.round(timeoutMs / 1000) + " s");
    }
    if (isAbort(e)) throw e;
    throw new ApiError(0, "NETWORK", "cannot reach the server (" + (e && e.message ? e.message : "network error") + ")");
  }

  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch (_) {
      data = null;
    }
  }
  if (resp.ok) return data == null ? {} : data;

  const err = data && typeof data === "object" && data.error && typeof data.error === "object" ? data.error : null;
  const code = err && typeof err.code === "string" ? err.code : "HTTP_" + resp.status;
  let message = err && typeof err.message === "string" && err.message ? err.message : "";
  if (!message) message = resp.status + " " + (resp.statusText || "error");
  const error = new ApiError(resp.status, code, message, data);
  if (resp.status === 401 && !opts.noAuthRedirect && onUnauthorized) onUnauthorized(error);
  throw error;
}

export const get = (path, opts) => request("GET", path, opts);
export const post = (path, body, opts = {}) => request("POST", path, { ...opts, body });

// Builds "/v1/jobs?limit=50&state=running" from the parameters that are set.
export function withQuery(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  }
  const s = q.toString();
  return s ? path + "?" + s : path;
}

// --- Session -------------------------------------------------------------

// -> {user, role, csrf, expires_ms}; the server sets the HttpOnly cookie.
export async function login(user, password) {
  const r = await request("POST", "/v1/login", {
    body: { user, password, browser: true },
    noAuthRedirect: true,
  });
  setCsrf(r.csrf);
  return { user: r.user || user, role: r.role || "member", expires_ms: r.expires_ms };
}

// -> {user, role} when the cookie is valid; null when not signed in (401).
export async function whoami() {
  try {
    const r = await request("GET", "/v1/whoami", { noAuthRedirect: true });
    setCsrf(r.csrf);
    return { user: r.subject || "", role: r.role || "member", groups: Array.isArray(r.groups) ? r.groups : [] };
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return null;
    throw e;
  }
}

// Ends the session (the server clears the cookie). A 401 means it had
// ended already; any other failure is thrown and the session kept.
export async function logout() {
  try {
    await request("POST", "/v1/logout", { noAuthRedirect: true });
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 401)) throw e;
  }
  setCsrf("");
}
