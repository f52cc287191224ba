// The overview, machines, queue and groups pages.

import * as api from "./api.js";
import {
  h, fill, dataTable, replaceBody, genericTable, firstArray, pill, badge, jobLink, attemptLink,
  timeEl, fmtMiB, fmtGpus, fmtDuration, specGpus, known, errorLine, errorText, changed, budgetAlertText,
} from "./dom.js";
import { percentChart, alignSeries } from "./charts.js";


export function pageSection(title, ...children) {
  return h("section", { class: "page" }, h("h1", null, title), ...children);
}

export function card(title, ...children) {
  return h("section", { class: "card" }, title ? h("h2", null, title) : null, ...children);
}

// Reports a refresh's failure in `err` without dropping what is shown.
export async function guarded(err, fn) {
  try {
    await fn();
    err.set("");
  } catch (e) {
    if (api.isAbort(e)) throw e;
    if (e && e.status === 401) return; // the app shows the sign-in form
    err.set(errorText(e));
  }
}

// --- Overview ------------------------------------------------------------

function gpuModel(g) {
  const name = g.name || "unknown GPU";
  return g.mig && g.mig.profile ? name + " (MIG " + g.mig.profile + ")" : name;
}

function usedGpus(g) {
  const m = typeof g.used_milli === "number" ? g.used_milli : 0;
  return Math.min(1000, Math.max(0, m)) / 1000;
}

const QUEUE_PAGE = 100;
const NODES_PAGE = 50;  // the Overview's table
const MACHINES_PAGE = 20;  // the Machines page's cards, each with a plot

// Rows of GET /v1/pool/summary's "gpus" (thousandths of a GPU).
const milli = (v) => fmtGpus((typeof v === "number" ? v : 0) / 1000);
const SUMMARY_COLUMNS = [
  { label: "Model", cell: (m) => [m.model, m.simulated ? " " : null, m.simulated ? badge("SIMULATED", "sim") : null] },
  { label: "GPUs", class: "num", cell: (m) => fmtGpus(m.gpus) },
  { label: "In use", class: "num", cell: (m) => milli(m.used_milli) },
  { label: "Free", class: "num", cell: (m) => h("strong", null, milli(m.free_milli)) },
  { label: "Unavailable", class: "num", cell: (m) => milli(m.unavailable_milli) },
];

// Server-side pages of a list by offset (the queue, the machines, the
// admin's lists): Previous
// and Next, and "jobs 1–100 of 1234". `load(offset, limit)` answers
// {items, total}; `show(items)` draws a page. The buttons' ids are
// ID-prev and ID-next, the range's ID-range.
export function offsetPager(err, { id, what, size, load, show }) {
  const info = h("span", { id: id + "-range", class: "muted" });
  const prev = h("button", { id: id + "-prev", type: "button", disabled: true }, "Previous");
  const next = h("button", { id: id + "-next", type: "button", disabled: true }, "Next");
  let offset = 0;
  const refresh = () => guarded(err, async () => {
    const { items, total } = await load(offset, size);
    if (offset > 0 && offset >= total) {  // the list shrank below this page
      offset = Math.max(0, total - size);
      return refresh();
    }
    prev.disabled = offset === 0;
    next.disabled = offset + items.length >= total;
    info.textContent = total ? what + " " + (offset + 1) + "–" + (offset + items.length) + " of " + total : "";
    show(items);
  });
  prev.addEventListener("click", () => {
    offset = Math.max(0, offset - size);
    refresh();
  });
  next.addEventListener("click", () => {
    offset += size;
    refresh();
  });
  return { element: h("div", { class: "pager" }, prev, next, info), refresh };
}

// A page of GET /v1/nodes: {items, total}.
async function nodesPage(ctx, offset, limit) {
  const r = await api.get("/v1/nodes?limit=" + limit + "&offset=" + offset, { signal: ctx.signal });
  const nodes = firstArray(r.nodes);
  return { items: nodes, total: typeof r.total === "number" ? r.total : nodes.length };
}

const NODE_COLUMNS = [
  { label: "Machine", cell: (n) => h("a", { href: "#/machines", class: "node-name" }, n.name || n.id) },
  { label: "Status", cell: (n) => pill(n.status || n.state) },
  {
    label: "GPUs", class: "num",
    cell: (n) => {
      const gpus = n.gpus || [];
      const used = gpus.reduce((s, g) => s + usedGpus(g), 0);
      return fmtGpus(used) + " / " + gpus.length;
    },
  },
  {
    label: "Models",
    cell: (n) => {
      const names = [...new Set((n.gpus || []).map(gpuModel))];
      const sim = (n.gpus || []).some((g) => g.simulated);
      return [names.join(", ") || "—", sim ? " " : null, sim ? badge("SIMULATED", "sim") : null];
    },
  },
  { label: "Owner group", cell: (n) => n.owner_group || "—" },
  { label: "Tasks", class: "num", cell: (n) => String(n.running_tasks ?? 0) },
  { label: "CPUs", class: "num", cell: (n) => (typeof n.cpu_milli === "number" ? fmtGpus(n.cpu_milli / 1000) : "—") },
  { label: "Memory", class: "num", cell: (n) => fmtMiB(n.memory_mib) },
];

// One line on the overview when an account the user sees has passed 75%
// of its budget (or is at its limit), linking to the Money page.
function moneyBanner(ctx, err) {
  const line = h("p", { id: "money-banner", class: "money-banner", hidden: true });
  const seen = {};
  ctx.every(30000, () => guarded(err, async () => {
    const r = await api.get("/v1/accounts", { signal: ctx.signal });
    const alerts = firstArray(r.accounts).filter((a) => a.budget && a.budget.alert >= 75);
    if (!changed(seen, "alerts", alerts)) return;
    const texts = alerts.map(budgetAlertText);
    const more = texts.length > 2 ? " (and " + (texts.length - 2) + " more)" : "";
    line.classList.toggle("at-limit", alerts.some((a) => a.budget.at_limit || a.budget.alert >= 100));
    fill(line, texts.slice(0, 2).join("; ") + more + ". ", h("a", { href: "#/money" }, "See Money"));
    line.hidden = alerts.length === 0;
  }));
  return line;
}

export async function renderOverview(main, ctx) {
  const err = errorLine("page-error");
  const stats = h("div", { class: "stats", id: "pool-stats" });
  const summaryBox = h("div");
  const chartBox = h("div", { id: "pool-chart", class: "chart" });
  const chartInfo = h("p", { class: "muted small" });
  const nodesBox = h("div");
  const eventsBox = h("div");
  const seen = {};
  const pager = offsetPager(err, {
    id: "nodes", what: "machines", size: NODES_PAGE,
    load: (offset, limit) => nodesPage(ctx, offset, limit),
    show: (nodes) => {
      if (!changed(seen, "nodes", nodes)) return;
      if (document.getElementById("nodes-table")) {
        replaceBody("nodes-table", NODE_COLUMNS, nodes, (n) => ({ "data-node": n.name }), "No machines have joined yet.");
      } else {
        fill(nodesBox, dataTable("nodes-table", NODE_COLUMNS, nodes, (n) => ({ "data-node": n.name }), "No machines have joined yet."));
      }
    },
  });
  main.appendChild(pageSection("Overview", err, moneyBanner(ctx, err), stats,
    h("div", { class: "grid-2" },
      h("section", { id: "gpu-summary", class: "card" }, h("h2", null, "GPUs by model"), summaryBox),
      card("Pool, last 24 hours", chartBox, chartInfo)),
    card("Machines", nodesBox, pager.element),
    card("Recent machine events", eventsBox)));

  // The counts come from the server (GET /v1/pool/summary), the machines a
  // page at a time.
  ctx.every(5000, () => guarded(err, async () => {
    const s = await api.get("/v1/pool/summary", { signal: ctx.signal });
    const models = firstArray(s.gpus);
    if (!changed(seen, "summary", s)) return;
    const sum = (k) => models.reduce((t, m) => t + (typeof m[k] === "number" ? m[k] : 0), 0);
    fill(stats,
      stat("Machines online", (s.nodes_online ?? 0) + " / " + (s.nodes ?? 0)),
      stat("GPUs", fmtGpus(sum("gpus"))),
      stat("In use", milli(sum("used_milli"))),
      stat("Free", milli(sum("free_milli"))));
    fill(summaryBox, models.length
      ? dataTable("gpu-summary-table", SUMMARY_COLUMNS, models, (m) => ({ "data-model": m.model }))
      : h("p", { class: "muted" }, "No GPUs in the pool yet."));
  }));
  ctx.every(5000, pager.refresh);

  const chart = percentChart(chartBox, ctx, {
    series: [{ label: "Utilization" }, { label: "Allocated" }],
    height: 200,
  });
  ctx.every(60000, () => guarded(err, async () => {
    const r = await api.get("/v1/pool/telemetry?since=24h&step=5m", { signal: ctx.signal });
    const fields = Array.isArray(r.fields) ? r.fields : [];
    const points = Array.isArray(r.points) ? r.points : [];
    const col = (name) => fields.indexOf(name);
    const [iT, iU, iUS, iRep, iA, iG, iP, iR] =
      ["t_ms", "utilization", "utilization_sum", "gpus_reporting", "allocated_gpus", "gpus", "jobs_pending", "jobs_running"].map(col);
    if (iT < 0 || !points.length) {
      chart.showNote("No telemetry for the last 24 hours yet.");
      chartInfo.textContent = "";
      return;
    }
    const num = (p, i) => (i >= 0 && typeof p[i] === "number" && Number.isFinite(p[i]) ? p[i] : null);
    const xs = [];
    const util = [];
    const alloc = [];
    for (const p of points) {
      if (!Array.isArray(p)) continue;
      xs.push(p[iT] / 1000);
      let u = num(p, iU);
      if (u == null && num(p, iUS) != null && num(p, iRep)) u = num(p, iUS) / num(p, iRep);
      util.push(u == null ? null : u * 100);
      const g = num(p, iG);
      const a = num(p, iA);
      alloc.push(g && a != null ? (a / g) * 100 : null);
    }
    chart.setData(xs, [util, alloc]);
    const last = points[points.length - 1];
    const parts = [];
    if (num(last, iG) != null) parts.push(fmtGpus(num(last, iG)) + " GPUs");
    if (num(last, iA) != null) parts.push(fmtGpus(num(last, iA)) + " allocated");
    if (num(last, iR) != null) parts.push(fmtGpus(num(last, iR)) + " jobs running");
    if (num(last, iP) != null) parts.push(fmtGpus(num(last, iP)) + " pending");
    chartInfo.textContent = parts.length ? "Latest (5 min mean): " + parts.join(" · ") : "";
  }));

  ctx.every(30000, () => guarded(err, async () => {
    const r = await api.get("/v1/events?newest=1&limit=50", { signal: ctx.signal });
    const events = firstArray(r.events ? r.events : r).slice();
    events.sort((a, b) => (b && b.ts_ms ? b.ts_ms : 0) - (a && a.ts_ms ? a.ts_ms : 0));
    if (!changed(seen, "events", events)) return;
    fill(eventsBox, genericTable("events-table", events, "No machine events."));
  }));
}

function stat(label, value) {
  return h("div", { class: "stat" }, h("div", { class: "stat-value" }, value), h("div", { class: "stat-label" }, label));
}

// --- Machines ------------------------------------------------------------

function lendingSummary(n) {
  const l = n.lending;
  if (l == null) return "Lends every GPU (no lending policy).";
  const parts = ["Lending: " + (l.mode || "unknown")];
  if (l.sharing) parts.push("sharing " + l.sharing);
  const list = (label, v) => {
    if (Array.isArray(v) && v.length) parts.push(label + " " + v.join(", "));
  };
  list("to groups", l.allow_groups);
  list("to users", l.allow_users);
  list("not to groups", l.deny_groups);
  list("not to users", l.deny_users);
  if (l.max_runtime_ms > 0) parts.push("jobs up to " + fmtDuration(l.max_runtime_ms));
  const text = parts.join(" · ");
  if (l.next_change_ms > 0) return [text, " · changes at ", timeEl(l.next_change_ms)];
  return text;
}

function gpuLent(n, g) {
  const l = n.lending;
  if (l == null) return "yes";
  const lent = l.gpus && typeof l.gpus === "object" ? l.gpus : {};
  if (Object.prototype.hasOwnProperty.call(lent, g.uuid)) {
    const mib = lent[g.uuid];
    return typeof mib === "number" && typeof g.memory_mib === "number" && mib < g.memory_mib
      ? "yes, " + fmtMiB(mib) : "yes";
  }
  const why = l.not_lent && typeof l.not_lent === "object" ? l.not_lent[g.uuid] : null;
  return h("span", { class: "muted" }, why ? "no: " + why : "no");
}

const GPU_COLUMNS = [
  { label: "GPU", class: "num", cell: (g) => String(g.index ?? "—") },
  {
    label: "Model",
    cell: (g) => [gpuModel(g), g.simulated ? " " : null, g.simulated ? badge("SIMULATED", "sim") : null],
  },
  {
    label: "Memory", class: "num",
    cell: (g) => {
      const t = g.telemetry;
      return (t && known(t.memory_used_mib) ? fmtMiB(t.memory_used_mib) + " / " : "") + fmtMiB(g.memory_mib);
    },
  },
  { label: "Util.", class: "num", cell: (g) => (g.telemetry && known(g.telemetry.utilization_percent) ? g.telemetry.utilization_percent + " %" : "—") },
  { label: "Temp.", class: "num", cell: (g) => (g.telemetry && known(g.telemetry.temperature_c) ? g.telemetry.temperature_c + " °C" : "—") },
  {
    label: "Power", class: "num",
    cell: (g) => (g.telemetry && known(g.telemetry.power_mw) ? Math.round(g.telemetry.power_mw / 1000) + " W" : "—"),
  },
  { label: "Held", class: "num", cell: (g) => (usedGpus(g) > 0 ? fmtGpus(usedGpus(g)) : "—") },
  {
    label: "Running",
    cell: (g) => {
      const ids = Array.isArray(g.attempts) && g.attempts.length ? g.attempts : g.attempt ? [g.attempt] : [];
      if (!ids.length) return "—";
      const out = [];
      ids.forEach((a, i) => out.push(i ? ", " : null, attemptLink(a)));
      return out;
    },
  },
  { label: "Lent", cell: null },
];

function gpuColumns(n) {
  return GPU_COLUMNS.map((c) => (c.label === "Lent" ? { ...c, cell: (g) => gpuLent(n, g) } : c));
}

export function nodeInfo(n) {
  const labels = n.labels && typeof n.labels === "object" ? Object.entries(n.labels) : [];
  const meta = [];
  if (typeof n.cpu_milli === "number") meta.push(fmtGpus(n.cpu_milli / 1000) + " CPUs");
  if (typeof n.memory_mib === "number") meta.push(fmtMiB(n.memory_mib) + " memory");
  const tasks = n.running_tasks ?? 0;
  meta.push(tasks + (tasks === 1 ? " running task" : " running tasks"));
  if (n.owner_group) meta.push("owner group " + n.owner_group);
  return [
    h("div", { class: "node-head" },
      h("h2", null, n.name || n.id), pill(n.status || n.state),
      n.connected === false ? badge("disconnected", "bad") : null),
    h("p", { class: "meta" }, meta.join(" · ")),
    h("p", { class: "meta" }, lendingSummary(n)),
    labels.length ? h("p", { class: "labels" }, labels.map(([k, v]) => h("span", { class: "chip" }, v === "" ? k : k + "=" + v))) : null,
    (n.gpus || []).length
      ? dataTable(null, gpuColumns(n), n.gpus, (g) => ({ "data-gpu": String(g.index) }))
      : h("p", { class: "muted" }, "No GPUs."),
  ];
}

export async function renderMachines(main, ctx) {
  const err = errorLine("page-error");
  const list = h("div", { id: "machines", class: "machines" });
  const empty = h("p", { class: "muted", hidden: true }, "No machines have joined yet.");
  const pager = offsetPager(err, {
    id: "machines-page", what: "machines", size: MACHINES_PAGE,
    load: (offset, limit) => nodesPage(ctx, offset, limit),
    show: (nodes) => showCards(nodes),
  });
  main.appendChild(pageSection("Machines", err, empty, list, pager.element));

  const cards = new Map(); // name -> {root, info, chart, gpus, visible, loaded, json}
  const io = typeof IntersectionObserver === "function"
    ? new IntersectionObserver((entries) => {
      for (const e of entries) {
        const c = cards.get(e.target.dataset.node);
        if (!c) continue;
        c.visible = e.isIntersecting;
        if (c.visible && !c.loaded) loadTelemetry(c).catch(() => {});
      }
    }, { rootMargin: "200px" })
    : null;
  ctx.onDispose(() => io && io.disconnect());

  async function loadTelemetry(c) {
    if (c.busy || !ctx.alive) return;
    c.busy = true;
    try {
      const r = await api.get("/v1/nodes/" + encodeURIComponent(c.name) + "/telemetry?since=1h&step=10s", { signal: ctx.signal });
      c.loaded = true;
      const fields = Array.isArray(r.fields) ? r.fields : [];
      const fi = fields.indexOf("utilization");
      const gpus = (Array.isArray(r.gpus) ? r.gpus : []).slice().sort((a, b) => a.gpu - b.gpu);
      const key = gpus.map((g) => g.gpu).join(",");
      if (fi < 0 || !gpus.some((g) => Array.isArray(g.points) && g.points.length)) {
        ensureChart(c, key, gpus);
        c.chart.showNote("No GPU telemetry in the last hour.");
        return;
      }
      ensureChart(c, key, gpus);
      const { xs, ys } = alignSeries(gpus.map((g) => (Array.isArray(g.points) ? g.points : [])), fi, (v) => v * 100);
      c.chart.setData(xs, ys);
    } catch (e) {
      if (api.isAbort(e)) return;
      ensureChart(c, c.chartKey || "", []);
      c.chart.showNote("Telemetry: " + errorText(e));
    } finally {
      c.busy = false;
    }
  }

  function ensureChart(c, key, gpus) {
    if (c.chart && c.chartKey === key) return;
    if (c.chart) c.chart.destroy();
    c.chartKey = key;
    c.chart = percentChart(c.chartBox, ctx, {
      title: "GPU utilization, last hour",
      series: gpus.map((g) => ({ label: "GPU " + g.gpu })),
      height: 150,
    });
  }

  // The cards of one page of machines, in the server's order; the cards of
  // machines no longer on it go, with their plots.
  function showCards(nodes) {
    empty.hidden = nodes.length > 0;
    const names = new Set();
    for (const n of nodes) {
      const name = n.name || n.id;
      names.add(name);
      let c = cards.get(name);
      if (!c) {
        const info = h("div", { class: "node-info" });
        const chartBox = h("div", { class: "chart node-chart" });
        const root = h("article", { class: "card node-card", "data-node": name }, info, chartBox);
        c = { name, root, info, chartBox, chart: null, visible: !io, loaded: false, json: "" };
        cards.set(name, c);
        if (io) io.observe(root);
      }
      const json = JSON.stringify(n);
      if (json !== c.json) {
        c.json = json;
        fill(c.info, nodeInfo(n));
      }
      list.appendChild(c.root); // keeps the server's order; moves, never copies
      if (!io && !c.loaded) loadTelemetry(c).catch(() => {});
    }
    for (const [name, c] of cards) {
      if (names.has(name)) continue;
      if (io) io.unobserve(c.root);
      if (c.chart) c.chart.destroy();
      c.root.remove();
      cards.delete(name);
    }
  }
  ctx.every(5000, pager.refresh);

  // Charts of visible machines follow the 10 s buckets.
  ctx.every(15000, async () => {
    await Promise.all([...cards.values()].filter((c) => c.visible).map((c) => loadTelemetry(c)));
  }, false);
}

// --- Queue ---------------------------------------------------------------

const QUEUE_COLUMNS = [
  { label: "Position", class: "num", cell: (j) => (j.position == null ? "next pass" : String(j.position)) },
  { label: "Job", class: "num", cell: (j) => jobLink(j.id) },
  { label: "Name", cell: (j) => jobLink(j.id, j.name || "(unnamed)") },
  { label: "Owner", cell: (j) => j.owner || "—" },
  { label: "Group", cell: (j) => j.group || "—" },
  { label: "Priority", cell: (j) => j.priority || "—" },
  { label: "GPUs", class: "num", cell: (j) => fmtGpus(specGpus(j)) },
  { label: "Submitted", cell: (j) => timeEl(j.created_ms) },
  {
    label: "Reason", class: "wide",
    cell: (j) => [j.reason || "—", j.explanation ? h("div", { class: "muted small" }, j.explanation) : null],
  },
];

// A page of one table from one endpoint, refreshed every `everyMs` while
// shown; `table(items)` builds it, `key` names the list in the answer.
function tablePage(main, ctx, { title, intro, everyMs, path, key, table }) {
  const err = errorLine("page-error");
  const box = h("div");
  main.appendChild(pageSection(title, h("p", { class: "muted" }, intro), err, box));
  const seen = {};
  ctx.every(everyMs, () => guarded(err, async () => {
    const r = await api.get(path, { signal: ctx.signal });
    const items = firstArray(r[key] ? r[key] : r);
    if (!changed(seen, key, items)) return;
    fill(box, table(items));
  }));
}



// The queue a page of QUEUE_PAGE at a time (the server pages it).
export async function renderQueue(main, ctx) {
  const err = errorLine("page-error");
  const box = h("div");
  const seen = {};
  const pager = offsetPager(err, {
    id: "queue", what: "jobs", size: QUEUE_PAGE,
    load: async (offset, limit) => {
      const r = await api.get("/v1/queue?limit=" + limit + "&offset=" + offset, { signal: ctx.signal });
      const jobs = firstArray(r.jobs);
      return { items: jobs, total: typeof r.total === "number" ? r.total : jobs.length };
    },
    show: (jobs) => {
      if (!changed(seen, "jobs", jobs)) return;
      fill(box, dataTable("queue-table", QUEUE_COLUMNS, jobs, (j) => ({ "data-job": String(j.id) }),
        "No jobs are waiting."));
    },
  });
  main.appendChild(pageSection("Queue",
    h("p", { class: "muted" }, "Pending jobs in the order the scheduler considers them."),
    err, box, pager.element));
  ctx.every(5000, pager.refresh);
}

// --- Groups --------------------------------------------------------------

export async function renderGroups(main, ctx) {
  tablePage(main, ctx, {
    title: "Groups",
    intro: "Fair share per group: weights, guarantees, GPUs in use and recent usage.",
    everyMs: 10000, path: "/v1/groups", key: "groups",
    table: (groups) => genericTable("groups-table", groups, "No groups."),
  });
}
