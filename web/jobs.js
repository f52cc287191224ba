// The jobs page (list, filter, paging, cancel, submit) and one job's page
// (details, attempts, live log).

import * as api from "./api.js";
import {
  h, fill, dataTable, pill, jobLink, timeEl, fmtGpus, fmtDuration, specGpus, isLive,
  errorLine, errorText, changed, firstArray,
} from "./dom.js";
import { gpuUsePanel, checkpointsPanel, logDownload } from "./job_panels.js";

const PAGE = 50;

const STATE_FILTERS = [
  ["", "All states"],
  ["pending,scheduled,running", "Live (pending, scheduled, running)"],
  ["pending", "Pending"],
  ["scheduled", "Scheduled"],
  ["running", "Running"],
  ["succeeded", "Succeeded"],
  ["failed", "Failed"],
  ["cancelled", "Cancelled"],
];

// Kept while the dashboard is open, so coming back keeps the filter.
const view = { state: "" };

async function cancelJob(id) {
  return api.post("/v1/jobs/" + encodeURIComponent(String(id)) + "/cancel", {});
}

// --- Jobs list -----------------------------------------------------------

export async function renderJobs(main, ctx) {
  const err = errorLine("jobs-error");
  let before = null; // null: the newest page; else ids below this
  const stack = []; // the `before` of the pages newer than this one

  const filter = h("select", { id: "job-state", name: "state" },
    STATE_FILTERS.map(([v, label]) => h("option", { value: v, selected: v === view.state }, label)));
  const older = h("button", { id: "jobs-older", type: "button", disabled: true }, "Older");
  const newer = h("button", { id: "jobs-newer", type: "button", hidden: true }, "Newest");
  const pageInfo = h("span", { class: "muted small", id: "jobs-page" });
  const tableBox = h("div");

  main.appendChild(h("section", { class: "page" },
    h("h1", null, "Jobs"),
    submitCard(),
    h("section", { class: "card" },
      h("div", { class: "toolbar" },
        h("h2", null, "Recent jobs"),
        h("label", { class: "inline" }, "Show ", filter)),
      err, tableBox,
      h("div", { class: "pager" }, newer, older, pageInfo))));

  const seen = {};
  let lastJobs = [];

  const columns = [
    { label: "ID", class: "num", cell: (j) => jobLink(j.id) },
    { label: "Name", cell: (j) => jobLink(j.id, j.name || "(unnamed)") },
    { label: "Owner", cell: (j) => j.owner || "—" },
    { label: "Group", cell: (j) => j.group || "—" },
    { label: "State", cell: (j) => pill(j.state) },
    { label: "GPUs", class: "num", cell: (j) => fmtGpus(specGpus(j)) },
    { label: "Submitted", cell: (j) => timeEl(j.created_ms) },
    {
      label: "Reason", class: "wide",
      cell: (j) => (j.state === "pending" && j.position != null
        ? ["#" + j.position + " in queue", j.reason ? ": " + j.reason : ""] : j.reason || ""),
    },
    {
      label: "", class: "actions",
      cell: (j) => (isLive(j.state)
        ? h("button", {
          type: "button", class: "cancel small-button", "data-job": String(j.id),
          "aria-label": "Cancel job " + j.id, onclick: (ev) => onCancel(ev.currentTarget, j.id),
        }, "Cancel")
        : null),
    },
  ];

  async function onCancel(button, id) {
    button.disabled = true;
    try {
      await cancelJob(id);
      err.set("");
      delete seen.jobs;
      await refresh();
    } catch (e) {
      if (api.isAbort(e)) return;
      err.set("Cannot cancel job " + id + ": " + errorText(e));
      button.disabled = false;
    }
  }

  async function load() {
    const path = api.withQuery("/v1/jobs", { limit: PAGE, state: view.state, before });
    const r = await api.get(path, { signal: ctx.signal });
    let jobs = firstArray(r.jobs ? r.jobs : r);
    const all = jobs.length;
    // Only ids below `before`, newest first, whatever the server did.
    if (before != null) jobs = jobs.filter((j) => typeof j.id === "number" && j.id < before);
    jobs = jobs.slice().sort((a, b) => b.id - a.id);
    lastJobs = jobs;
    older.disabled = all < PAGE || !jobs.length;
    newer.hidden = before == null;
    pageInfo.textContent = jobs.length
      ? "Jobs " + jobs[jobs.length - 1].id + "–" + jobs[0].id + (before == null ? " (newest)" : "")
      : before != null && all ? "This server does not page back (before=)." : "";
    if (!changed(seen, "jobs", [before, jobs])) return;
    fill(tableBox, dataTable("jobs-table", columns, jobs, (j) => ({ "data-job": String(j.id) }),
      view.state ? "No jobs in this state." : "No jobs yet. Submit one above."));
  }

  async function refresh() {
    try {
      await load();
      if (!err.textContent.startsWith("Cannot cancel")) err.set("");
    } catch (e) {
      if (api.isAbort(e) || (e && e.status === 401)) return;
      err.set(errorText(e));
    }
  }

  filter.addEventListener("change", () => {
    view.state = filter.value;
    before = null;
    stack.length = 0;
    refresh();
  });
  older.addEventListener("click", () => {
    if (!lastJobs.length) return;
    stack.push(before);
    before = Math.min(...lastJobs.map((j) => j.id));
    refresh();
  });
  newer.addEventListener("click", () => {
    before = stack.length ? stack.pop() : null;
    if (before == null) stack.length = 0;
    refresh();
  });

  ctx.every(5000, refresh);
}

// The submit form: fields, or a pasted spec (YAML, or JSON, which is YAML
// too) when that is not empty. The server reads a pasted spec as the CLI
// reads job.yaml, so its errors name the field and the line.
function submitCard() {
  const name = h("input", { id: "submit-name", name: "name", type: "text", placeholder: "train", autocomplete: "off" });
  const run = h("textarea", { id: "submit-run", name: "run", rows: 3, placeholder: "python3 train.py", spellcheck: "false" });
  const gpus = h("input", { id: "submit-gpus", name: "gpus", type: "number", min: 0, step: 0.1, value: 1, inputmode: "decimal" });
  const spec = h("textarea", {
    id: "submit-spec", name: "spec", rows: 7, spellcheck: "false",
    placeholder: "name: train\nrun: python3 train.py\nresources:\n  gpus: 1",
  });
  const button = h("button", { id: "submit-button", type: "submit", class: "primary" }, "Submit");
  const error = errorLine("submit-error");

  const form = h("form", { id: "submit-form", class: "submit-form", novalidate: true },
    h("div", { class: "submit-fields" },
      h("div", { class: "row" },
        h("div", { class: "field grow" }, h("label", { for: "submit-name" }, "Name"), name),
        h("div", { class: "field gpus" }, h("label", { for: "submit-gpus" }, "GPUs"), gpus)),
      h("div", { class: "field" }, h("label", { for: "submit-run" }, "Command (run with /bin/sh -c)"), run)),
    h("div", { class: "field submit-spec" },
      h("label", { for: "submit-spec" }, "Or paste a job spec, YAML or JSON (used instead of the fields when not empty)"), spec),
    h("div", { class: "submit-actions" }, button, error));

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    error.set("");
    let body;
    const raw = spec.value.trim();
    if (!raw) {
      if (!run.value.trim()) {
        error.set("Enter a command to run, or paste a job spec.");
        run.focus();
        return;
      }
      body = { run: run.value };
      if (name.value.trim()) body.name = name.value.trim();
      const g = gpus.value.trim();
      if (g !== "") {
        const n = Number(g);
        if (!Number.isFinite(n) || n < 0) {
          error.set("GPUs: enter a number such as 1, 2 or 0.5.");
          gpus.focus();
          return;
        }
        body.resources = { gpus: n };
      }
    }
    button.disabled = true;
    try {
      const r = raw
        ? await api.request("POST", "/v1/jobs", { text: spec.value, type: "application/yaml" })
        : await api.post("/v1/jobs", body);
      if (r && r.id != null) location.hash = "#/jobs/" + encodeURIComponent(String(r.id));
      else error.set("The server accepted the job but did not say its id.");
    } catch (e) {
      if (!api.isAbort(e)) error.set(errorText(e));
    } finally {
      button.disabled = false;
    }
  });

  return h("section", { class: "card" }, h("h2", null, "Submit a job"), form);
}

// --- One job -------------------------------------------------------------

const MAX_LOG_LINES = 20000;
// Lines kept for Download (the page shows the last MAX_LOG_LINES).
const MAX_KEPT_LINES = 1000000;

export async function renderJob(main, ctx, idParam) {
  const id = String(idParam);
  const title = h("h1", { id: "job-title" }, "Job " + id);
  const stateEl = h("span", { id: "job-state" });
  const cancel = h("button", { id: "job-cancel", type: "button", class: "danger", hidden: true }, "Cancel job");
  const err = errorLine("job-error");
  const details = h("dl", { class: "details" });
  const specBox = h("pre", { class: "spec" });
  const attemptsBox = h("div");
  const logStatus = h("p", { id: "job-log-status", class: "muted small" }, "Loading the log…");
  const log = h("pre", { id: "job-log", class: "log", tabindex: 0 });
  const kept = [];
  const download = logDownload(id, () => kept);
  const gpuUse = gpuUsePanel(ctx, id);
  const checkpoints = checkpointsPanel(ctx, id);
  const body = h("div", { hidden: true },
    h("section", { class: "card" }, h("h2", null, "Details"), details,
      h("details", null, h("summary", null, "Spec"), specBox)),
    h("section", { class: "card" }, h("h2", null, "Attempts"), attemptsBox),
    h("div", { class: "grid-2" }, gpuUse.root, checkpoints.root),
    h("section", { class: "card" }, h("h2", null, "Log"), logStatus, log, download));

  main.appendChild(h("section", { class: "page" },
    h("p", { class: "crumbs" }, h("a", { href: "#/jobs" }, "← Jobs")),
    h("div", { class: "job-head" }, title, stateEl, cancel),
    err, body));

  if (!/^\d+$/.test(id)) {
    err.set("not found: job ids are numbers");
    return;
  }

  let job = null;
  const seen = {};
  let logStarted = false;
  let logDone = false;

  function showAttempts(j) {
    const attempts = Array.isArray(j.attempt_list) ? j.attempt_list : [];
    fill(attemptsBox, dataTable("attempts", attemptColumns(), attempts,
      (a) => ({ "data-attempt": String(a.id) }), "No attempts yet."));
  }

  function show(j) {
    job = j;
    title.textContent = "Job " + j.id + (j.name ? ": " + j.name : "");
    document.title = title.textContent + " · gpupool";
    fill(stateEl, pill(j.state));
    cancel.hidden = !isLive(j.state);
    body.hidden = false;
    fill(details, detailRows(j)); // every time: "Ran for" moves on
    if (!changed(seen, "job", j)) return;
    specBox.textContent = JSON.stringify(j.spec || {}, null, 2);
    showAttempts(j);
    download.setRanks(Number((j.spec && j.spec.resources && j.spec.resources.nodes) || 1));
  }

  async function refresh() {
    if (job && !isLive(job.state) && logDone) return; // nothing more will change
    try {
      const j = await api.get("/v1/jobs/" + id, { signal: ctx.signal });
      show(j);
      if (!err.textContent.startsWith("Cannot cancel")) err.set("");
      if (!logStarted) {
        logStarted = true;
        followLog().catch(() => {});
      }
    } catch (e) {
      if (api.isAbort(e) || (e && e.status === 401)) return;
      if (e && e.status === 404) {
        body.hidden = true;
        cancel.hidden = true;
        fill(stateEl);
        err.set(e.message || "not found");
        logDone = true;
        job = { state: "not found" };
        return;
      }
      err.set(errorText(e));
    }
  }

  cancel.addEventListener("click", async () => {
    cancel.disabled = true;
    try {
      await cancelJob(id);
      err.set("");
      await refresh();
    } catch (e) {
      if (!api.isAbort(e)) err.set("Cannot cancel job " + id + ": " + errorText(e));
    } finally {
      cancel.disabled = false;
    }
  });

  // Follows the log with the long poll until the job ended and every line
  // came, or the page is left (ctx.signal aborts the request in flight).
  let shown = 0;
  async function followLog() {
    let cursor = 0;
    logStatus.textContent = "Following the log…";
    while (ctx.alive) {
      const t0 = Date.now();
      let r;
      try {
        r = await api.get("/v1/jobs/" + id + "/logs?after=" + encodeURIComponent(String(cursor)) + "&limit=1000&wait=25s",
          { signal: ctx.signal });
      } catch (e) {
        if (api.isAbort(e) || !ctx.alive) return;
        if (e && (e.status === 401 || e.status === 404)) return;
        if (e && e.status === 410) {
          logStatus.textContent = errorText(e);
          logDone = true;
          return;
        }
        logStatus.textContent = "Log: " + errorText(e) + " (retrying in 5 s)";
        await ctx.sleep(5000);
        continue;
      }
      const lines = Array.isArray(r.lines) ? r.lines : [];
      appendLines(lines, (r.nodes || 1) > 1);
      // Output means it runs: show that now rather than at the next refresh.
      if (lines.length && job && job.state === "scheduled") refresh();
      if (r.next_cursor != null) cursor = r.next_cursor;
      if (r.complete) {
        logDone = true;
        logStatus.textContent = shown ? "End of log." : "The job printed nothing.";
        refresh();
        return;
      }
      logStatus.textContent = "Following the log…" + (r.state ? " (" + r.state + ")" : "");
      // A long poll that answers at once with nothing new: do not spin.
      if (!lines.length && Date.now() - t0 < 1000) await ctx.sleep(1000);
    }
  }

  function appendLines(lines, ranks) {
    if (!lines.length) return;
    const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 24;
    const frag = document.createDocumentFragment();
    for (const l of lines) {
      const stream = l.stream === "stderr" || l.stream === "event" ? l.stream : "stdout";
      let text = stream === "event" ? "[gpupool] " + (l.text ?? "") : String(l.text ?? "");
      if (ranks && l.rank != null) text = "[rank " + l.rank + "] " + text;
      const span = document.createElement("span");
      span.className = "log-line log-" + stream;
      if (l.ts_ms) span.title = new Date(l.ts_ms).toLocaleString() + (l.attempt_id ? " · attempt " + l.attempt_id : "");
      span.textContent = text + "\n";
      frag.appendChild(span);
      if (kept.length < MAX_KEPT_LINES) kept.push(text);
      shown++;
    }
    log.appendChild(frag);
    let dropped = false;
    while (log.childElementCount > MAX_LOG_LINES && log.firstElementChild) {
      log.removeChild(log.firstElementChild);
      dropped = true;
    }
    if (dropped) log.classList.add("truncated");
    if (atBottom) log.scrollTop = log.scrollHeight;
  }

  ctx.every(5000, refresh);
}

function detailRows(j) {
  const r = (j.spec && j.spec.resources) || {};
  const cmd = j.spec ? (j.spec.run != null ? String(j.spec.run) : Array.isArray(j.spec.command) ? j.spec.command.join(" ") : "") : "";
  const rows = [
    ["Owner", j.owner],
    ["Group", j.group],
    ["Priority", j.priority],
    ["GPUs", fmtGpus(specGpus(j)) + (r.nodes > 1 ? " per node, " + r.nodes + " nodes" : "")],
    ["Submitted", timeEl(j.created_ms)],
    ["Started", timeEl(j.started_ms)],
    ["Finished", timeEl(j.finished_ms)],
    ["Ran for", j.started_ms > 0 ? fmtDuration((j.finished_ms > 0 ? j.finished_ms : Date.now()) - j.started_ms) : null],
    ["Exit code", j.exit_code],
    ["Position", j.state === "pending" ? (j.position == null ? "after the next scheduling pass" : j.position) : null],
    ["Reason", j.reason],
    ["Explanation", j.explanation],
    ["Restarts", j.restarts],
    ["Image", j.spec && j.spec.image],
    ["Command", cmd ? h("code", null, cmd) : null],
  ];
  const out = [];
  for (const [k, v] of rows) {
    if (v === undefined || v === null || v === "") continue;
    out.push(h("dt", null, k), h("dd", null, v instanceof Node ? v : String(v)));
  }
  return out;
}

function attemptColumns() {
  return [
    { label: "Attempt", cell: (a) => String(a.id) },
    { label: "Node", cell: (a) => a.node || a.node_id || "—" },
    { label: "State", cell: (a) => pill(a.state) },
    { label: "Started", cell: (a) => timeEl(a.started_ms) },
    { label: "Ended", cell: (a) => timeEl(a.finished_ms) },
    { label: "Exit", class: "num", cell: (a) => (a.exit_code == null ? "—" : String(a.exit_code)) },
    { label: "Work lost", class: "num", cell: (a) => (a.lost_work_ms > 0 ? fmtDuration(a.lost_work_ms) : "—") },
    {
      label: "Reason", class: "wide",
      cell: (a) => [
        a.reason || "—",
        Array.isArray(a.ranks) && a.ranks.length > 1
          ? h("ul", { class: "ranks" }, a.ranks.map((k) => h("li", null,
            "rank " + k.rank + ": " + (k.node || k.node_id || "?") + " " + (k.state || "")
            + (k.exit_code != null ? " (exit " + k.exit_code + ")" : "") + (k.reason ? ", " + k.reason : ""))))
          : null,
      ],
    },
  ];
}
