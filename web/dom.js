// Building the page from data without ever parsing data as HTML: every
// element comes from createElement and every text from textContent (or a
// text node), so a job named <img src=x onerror=alert(1)> shows as those
// characters.

// h("a", {href: "#/jobs/7", class: "id"}, "7") -> <a>.
// attrs: class, text, dataset-style "data-*" keys, on<Event> functions
// (added with addEventListener, never as attributes), hidden/disabled/...
// booleans, anything else set with setAttribute. Children: strings,
// numbers, nodes, arrays of them; null/undefined/false are skipped.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") el.className = Array.isArray(v) ? v.filter(Boolean).join(" ") : String(v);
      else if (k === "text") el.textContent = String(v);
      else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2).toLowerCase(), v);
      else if (k.startsWith("on") || k === "style") throw new Error("h: refusing attribute " + k);
      else if (v === true) el.setAttribute(k, "");
      else el.setAttribute(k, String(v));
    }
  }
  append(el, children);
  return el;
}

export function append(parent, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(parent, c);
    else if (c instanceof Node) parent.appendChild(c);
    else parent.appendChild(document.createTextNode(String(c)));
  }
  return parent;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

// Replaces el's children.
export function fill(el, ...children) {
  clear(el);
  return append(el, children);
}

// A table inside a wrapper that scrolls sideways on narrow screens.
// columns: [{label, cell(row) -> node|string, class}]; rowAttrs(row) -> attrs for <tr>.
export function dataTable(id, columns, rows, rowAttrs, empty = "Nothing here.") {
  const table = h("table", { id, class: "data" },
    h("thead", null, h("tr", null, columns.map((c) => h("th", { class: c.class, scope: "col" }, c.label)))),
    tableBody(columns, rows, rowAttrs, empty));
  return h("div", { class: "table-wrap" }, table);
}

export function tableBody(columns, rows, rowAttrs, empty = "Nothing here.") {
  const tbody = h("tbody");
  if (!rows.length) {
    tbody.appendChild(h("tr", { class: "empty" }, h("td", { colspan: columns.length }, empty)));
  }
  for (const row of rows) {
    tbody.appendChild(h("tr", rowAttrs ? rowAttrs(row) : null,
      columns.map((c) => h("td", { class: c.class }, c.cell(row)))));
  }
  return tbody;
}

// Replaces the <tbody> of the table with this id (keeps the header).
export function replaceBody(tableId, columns, rows, rowAttrs, empty) {
  const table = document.getElementById(tableId);
  if (!table) return;
  const old = table.tBodies[0];
  const body = tableBody(columns, rows, rowAttrs, empty);
  if (old) table.replaceChild(body, old);
  else table.appendChild(body);
}

// A generic table of an array of objects: one column per scalar field
// (in the order they first appear), nested values left out.
export function genericTable(id, items, empty) {
  const keys = [];
  for (const it of items) {
    if (!it || typeof it !== "object") continue;
    for (const [k, v] of Object.entries(it)) {
      if (isScalar(v) && !keys.includes(k)) keys.push(k);
    }
  }
  const columns = keys.map((k) => ({
    label: k,
    class: items.some((it) => it && typeof it[k] === "number") ? "num" : undefined,
    cell: (it) => scalarText(k, it ? it[k] : undefined),
  }));
  return dataTable(id, columns, items.filter((it) => it && typeof it === "object"), null, empty);
}

function isScalar(v) {
  return v === null || ["string", "number", "boolean"].includes(typeof v);
}

function scalarText(key, v) {
  if (v === undefined || v === null) return "—";
  if (typeof v === "number") {
    if (/_ms$/.test(key) && v > 1e11) return fmtTime(v);
    if (!Number.isInteger(v)) return v.toFixed(3).replace(/\.?0+$/, "");
    return String(v);
  }
  return String(v);
}

// The first array among an answer's values: {"groups": [...]} -> [...].
export function firstArray(obj) {
  if (Array.isArray(obj)) return obj;
  if (obj && typeof obj === "object") {
    for (const v of Object.values(obj)) if (Array.isArray(v)) return v;
  }
  return [];
}

// --- Small pieces --------------------------------------------------------

const STATE_CLASS = {
  // jobs and attempts
  pending: "wait", scheduled: "live", running: "live", preempting: "warn", stopping: "warn",
  "gang-stopping": "warn", succeeded: "ok", failed: "bad", cancelled: "off", lost: "bad",
  preempted: "warn", vacated: "warn", refused: "warn",
  // nodes
  available: "ok", busy: "live", paused: "warn", draining: "warn", reclaimed: "warn",
  offline: "bad", left: "off", ready: "ok",
};

export function pill(state) {
  const s = state == null || state === "" ? "unknown" : String(state);
  return h("span", { class: ["pill", "pill-" + (STATE_CLASS[s] || "off")], "data-state": s }, s);
}

export function badge(text, kind) {
  return h("span", { class: ["badge", kind ? "badge-" + kind : ""] }, text);
}

export const LIVE_JOB_STATES = ["pending", "scheduled", "running"];

export function isLive(state) {
  return LIVE_JOB_STATES.includes(state);
}

export function jobLink(id, text) {
  return h("a", { href: "#/jobs/" + encodeURIComponent(String(id)) }, text == null ? String(id) : text);
}

// "7.1" -> a link to job 7 that reads "7.1".
export function attemptLink(attemptId) {
  const s = String(attemptId);
  const job = s.split(".")[0];
  return /^\d+$/.test(job) ? jobLink(job, s) : h("span", null, s);
}

const dateTime = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit",
});
const timeOnly = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });

export function fmtTime(ms) {
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms <= 0) return "—";
  const d = new Date(ms);
  const now = new Date();
  if (d.toDateString() === now.toDateString()) return timeOnly.format(d);
  return dateTime.format(d);
}

export function timeEl(ms) {
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms <= 0) return "—";
  return h("time", { datetime: new Date(ms).toISOString(), title: dateTime.format(new Date(ms)) }, fmtTime(ms));
}

export function fmtDuration(ms) {
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) return "—";
  const s = Math.round(ms / 1000);
  if (s < 60) return s + " s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + " min " + (s % 60) + " s";
  const hh = Math.floor(m / 60);
  if (hh < 48) return hh + " h " + (m % 60) + " min";
  return Math.floor(hh / 24) + " d " + (hh % 24) + " h";
}

export function fmtMiB(mib) {
  if (typeof mib !== "number" || !Number.isFinite(mib) || mib < 0) return "—";
  if (mib >= 1024 * 1024) return (mib / 1024 / 1024).toFixed(1) + " TiB";
  if (mib >= 1024) return (mib / 1024).toFixed(mib >= 10240 ? 0 : 1) + " GiB";
  return Math.round(mib) + " MiB";
}

// GPUs as a count: 1, 0.5, 2.25 (trailing zeros dropped).
export function fmtGpus(n) {
  if (typeof n !== "number" || !Number.isFinite(n)) return "—";
  return String(Math.round(n * 1000) / 1000);
}

// Credits from micro-credits, exactly, as the CLI prints them: at least
// two decimals, more only when they are not zero (2.50, 0.000375, -3.20).
export function fmtCredits(micros) {
  if (typeof micros !== "number" || !Number.isFinite(micros)) return "—";
  const m = Math.abs(Math.round(micros));
  const frac = String(m % 1000000).padStart(6, "0").replace(/0+$/, "").padEnd(2, "0");
  return (micros < 0 ? "-" : "") + Math.floor(m / 1000000) + "." + frac;
}

// "group:vision" -> "vision", "user:alice" -> "alice", "pool" -> "pool".
export function accountName(account) {
  const s = String(account || "");
  const colon = s.indexOf(":");
  return colon >= 0 ? s.slice(colon + 1) : s;
}

// "2026-11" -> "November" (budget months are UTC months).
function monthName(month) {
  const m = /^(\d{4})-(\d{2})$/.exec(month || "");
  if (!m) return month || "this month's";
  return new Date(Date.UTC(+m[1], +m[2] - 1, 1)).toLocaleString("en", { month: "long", timeZone: "UTC" });
}

// What an account's budget alert says (GET /v1/accounts): "vision has spent
// 78% of its November budget" at 75 or 90, "vision is at its budget limit"
// at 100 (or when at_limit: also a balance used up); "" below 75.
export function budgetAlertText(a) {
  const b = a && a.budget;
  if (!b) return "";
  const name = accountName(a.account);
  if (b.at_limit || b.alert >= 100) return name + " is at its budget limit";
  if (b.alert >= 75) return name + " has spent " + b.percent + "% of its " + monthName(b.month) + " budget";
  return "";
}

// A spec's resources.gpus: a number, or text such as "500m" or "0.5".
export function specGpus(job) {
  const r = job && job.spec && job.spec.resources;
  const g = r ? r.gpus : undefined;
  if (g === undefined || g === null) return 0;
  if (typeof g === "number") return g;
  const s = String(g).trim();
  if (/^\d+m$/.test(s)) return parseInt(s, 10) / 1000;
  const n = Number(s);
  return Number.isFinite(n) ? n : s;
}

// A telemetry value where -1 (or absence) means unknown.
export function known(v) {
  return typeof v === "number" && Number.isFinite(v) && v >= 0;
}

export function errorText(e) {
  if (e && typeof e.message === "string" && e.message) return e.message;
  return String(e);
}

// A paragraph for errors; set(text) shows it, set("") hides it.
export function errorLine(id) {
  const el = h("p", { id, class: "error", role: "alert", hidden: true });
  el.set = (text) => {
    el.textContent = text || "";
    el.hidden = !text;
  };
  return el;
}

// A status line for what an action did: el.say(text) shows it, el.say(text,
// true) as an error, el.say("") hides it.
export function noticeLine(id) {
  const el = h("p", { id, class: "notice", role: "status", hidden: true });
  el.say = (text, bad) => {
    el.textContent = text || "";
    el.hidden = !text;
    el.classList.toggle("error", Boolean(bad));
  };
  return el;
}

// Runs fn only when `value` serializes differently from the last call with
// the same key object: avoids rebuilding identical tables every refresh.
export function changed(holder, key, value) {
  const s = JSON.stringify(value);
  if (holder[key] === s) return false;
  holder[key] = s;
  return true;
}
