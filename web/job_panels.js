// The job page's panels beside its attempts and log: the job's GPU use over
// its attempts (GET /v1/jobs/{id}/telemetry), its checkpoints (GET
// /v1/jobs/{id}/checkpoints), and the log as a file (every line, or one
// rank's).

import * as api from "./api.js";
import { h, fill, dataTable, firstArray, timeEl, fmtMiB, errorText, changed } from "./dom.js";
import { percentChart, alignSeries } from "./charts.js";

// A chart that is remade when its series change (their labels) and fed
// their points at field `fi` through `map`.
function seriesChart(box, ctx, title, map) {
  let chart = null;
  let key = "";
  return (series, fi, empty) => {
    const k = series.map((s) => s.label).join("|");
    if (!chart || k !== key) {
      if (chart) chart.destroy();
      key = k;
      chart = percentChart(box, ctx, { title, series: series.map((s) => ({ label: s.label })), height: 160 });
    }
    if (fi < 0 || !series.some((s) => s.points.length)) {
      chart.showNote(empty);
      return false;
    }
    const { xs, ys } = alignSeries(series.map((s) => s.points), fi, map);
    chart.setData(xs, ys);
    return true;
  };
}

// GPU utilization of every GPU each attempt held, one series per attempt
// and GPU ("7.1 · lab-a GPU 0"), and for a share what its own processes
// held of its memory cap, refreshed while the job is live.
export function gpuUsePanel(ctx, id) {
  const box = h("div", { id: "job-gpu-chart", class: "chart" });
  const shareBox = h("div", { id: "job-share-chart", class: "chart", hidden: true });
  const note = h("p", { class: "muted small" });
  const gpuChart = seriesChart(box, ctx, "GPU utilization", (v) => v * 100);
  const shareChart = seriesChart(shareBox, ctx, "Share memory (of its cap)", (v) => v * 100);
  const load = async () => {
    const r = await api.get("/v1/jobs/" + encodeURIComponent(id) + "/telemetry", { signal: ctx.signal });
    const fields = Array.isArray(r.fields) ? r.fields : [];
    const used = fields.indexOf("memory_used_mib");
    const cap = fields.indexOf("memory_total_mib");
    const series = [];
    const shares = [];
    for (const a of firstArray(r.attempts)) {
      for (const g of firstArray(a.gpus)) {
        series.push({ label: a.attempt + " · " + (a.node || "?") + " GPU " + g.gpu, points: firstArray(g.points) });
      }
      // Each point as [t, used / cap]: the share's own use of its cap.
      for (const g of firstArray(a.share)) {
        const points = firstArray(g.points).map((p) => [p[0], p[used] != null && p[cap] > 0 ? p[used] / p[cap] : null]);
        shares.push({ label: a.attempt + " · share of GPU " + g.gpu, points });
      }
    }
    const shown = gpuChart(series, fields.indexOf("utilization"), "No GPU telemetry for this job (yet).");
    shareBox.hidden = shares.length === 0;
    if (shares.length) shareChart(shares, 1, "No use of the share recorded (yet).");
    note.textContent = !shown ? "" : shares.length
      ? "What the GPUs did while this job's attempts held them (a share's GPU includes its neighbours), and what the share's own processes held of its memory cap."
      : "What the GPUs did while this job's attempts held them (a share's GPU includes its neighbours).";
  };
  const tick = ctx.every(30000, async () => {
    try {
      await load();
    } catch (e) {
      if (api.isAbort(e)) throw e;
      note.textContent = "GPU use: " + errorText(e);
    }
  });
  return { root: h("section", { class: "card" }, h("h2", null, "GPU use"), box, shareBox, note), refresh: tick };
}

const CHECKPOINT_COLUMNS = [
  { label: "Number", class: "num", cell: (c) => String(c.number) },
  { label: "Attempt", cell: (c) => c.attempt || "—" },
  { label: "Taken", cell: (c) => (c.created_ms ? timeEl(c.created_ms) : "—") },
  { label: "Size", class: "num", cell: (c) => (typeof c.bytes === "number" ? fmtMiB(c.bytes / 1048576) : "—") },
  { label: "Files", class: "num", cell: (c) => String(c.files ?? "—") },
];

export function checkpointsPanel(ctx, id) {
  const box = h("div");
  const seen = {};
  const refresh = ctx.every(30000, async () => {
    try {
      const r = await api.get("/v1/jobs/" + encodeURIComponent(id) + "/checkpoints", { signal: ctx.signal });
      const list = firstArray(r.checkpoints ? r.checkpoints : r).slice().reverse(); // newest first
      if (!changed(seen, "checkpoints", list)) return;
      fill(box, dataTable("job-checkpoints", CHECKPOINT_COLUMNS, list, (c) => ({ "data-number": String(c.number) }),
        "No checkpoints. A job that checkpoints (see the user guide) is restored from its newest one when it moves."),
      list.length ? h("p", { class: "muted small" }, "Restore one on your machine: gpupool checkpoint download " + id) : null);
    } catch (e) {
      if (api.isAbort(e)) throw e;
      fill(box, h("p", { class: "error" }, "Checkpoints: " + errorText(e)));
    }
  });
  return { root: h("section", { class: "card" }, h("h2", null, "Checkpoints"), box), refresh };
}

// The log as a text file: every line as the page shows it, or only rank
// R's lines of a multi-node job ("[rank R] " prefixes, kept in the file).
export function logDownload(id, lines) {
  const rankSelect = h("select", { id: "log-rank", "aria-label": "Which lines" }, h("option", { value: "" }, "all ranks"));
  const button = h("button", { id: "log-download", type: "button" }, "Download");
  button.addEventListener("click", () => {
    const rank = rankSelect.value;
    const prefix = rank === "" ? null : "[rank " + rank + "] ";
    const text = lines().filter((l) => prefix === null || l.startsWith(prefix)).join("\n") + "\n";
    const url = URL.createObjectURL(new Blob([text], { type: "text/plain" }));
    const a = h("a", { href: url, download: "job-" + id + (rank === "" ? "" : "-rank" + rank) + ".log" });
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  });
  const root = h("div", { class: "pager log-tools" }, rankSelect, button);
  // Offers the ranks a gang has (called when the job is known).
  root.setRanks = (n) => {
    if (rankSelect.options.length === n + 1 || n < 2) return;
    fill(rankSelect, h("option", { value: "" }, "all ranks"),
      Array.from({ length: n }, (_, r) => h("option", { value: String(r) }, "rank " + r)));
  };
  return root;
}
