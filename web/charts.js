// Time-series charts with uPlot (the IIFE build, loaded as the global
// `uPlot` by index.html from /ui/vendor/). Charts follow their container's
// width and take their colors from the page's CSS variables, so they suit
// light and dark mode alike.

import { h, fill } from "./dom.js";

export function chartsAvailable() {
  return typeof globalThis.uPlot === "function";
}

function cssVar(name, fallback) {
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return v || fallback;
}

export function seriesColor(i) {
  return cssVar("--chart-" + ((i % 6) + 1), ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#db2777", "#0891b2"][i % 6]);
}

function pct(v) {
  return v == null || !Number.isFinite(v) ? "—" : v.toFixed(1) + " %";
}

// A chart of percentages (0..100) over time inside `box`.
// series: [{label, color}], height: px. Returns {setData(xsSeconds, ys[][]), destroy()}.
// ctx (the page's lifetime) destroys it when the page goes away.
export function percentChart(box, ctx, { series, height = 180, title }) {
  let plot = null;
  let pending = null;
  let destroyed = false;
  const holder = h("div", { class: "chart-area" });
  const note = h("p", { class: "muted chart-note", hidden: true });
  fill(box, title ? h("h3", { class: "chart-title" }, title) : null, holder, note);

  if (!chartsAvailable()) {
    note.textContent = "Charts are unavailable: the uPlot library (/ui/vendor/uPlot.iife.min.js) did not load.";
    note.hidden = false;
    return { setData() {}, showNote() {}, destroy() {} };
  }

  const muted = cssVar("--muted", "#6b7280");
  const grid = cssVar("--grid", "rgba(127,127,127,0.2)");
  const axis = { stroke: muted, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };

  function width() {
    return Math.max(200, Math.floor(holder.clientWidth || box.clientWidth || 300));
  }

  function create(data) {
    const opts = {
      width: width(),
      height,
      scales: { x: { time: true }, y: { range: [0, 100] } },
      axes: [
        { ...axis },
        { ...axis, size: 48, values: (u, vals) => vals.map((v) => v + "%") },
      ],
      series: [
        { value: (u, v) => (v == null ? "—" : new Date(v * 1000).toLocaleString()) },
        ...series.map((s, i) => ({
          label: s.label,
          stroke: s.color || seriesColor(i),
          width: 1.5,
          points: { show: false },
          value: (u, v) => pct(v),
        })),
      ],
      cursor: { drag: { x: true, y: false } },
      legend: { show: true },
    };
    plot = new globalThis.uPlot(opts, data, holder);
  }

  let ro = null;
  if (typeof ResizeObserver === "function") {
    ro = new ResizeObserver(() => {
      if (plot) {
        const w = width();
        if (Math.abs(w - plot.width) > 2) plot.setSize({ width: w, height });
      }
    });
    ro.observe(box);
  }

  const api = {
    // xs: seconds since the epoch; ys: one array per series (null = gap).
    setData(xs, ys) {
      const data = [xs, ...ys];
      note.hidden = true;
      holder.hidden = false;
      if (!plot) {
        // Wait for layout when the box is not in the document yet.
        if (!box.isConnected) {
          pending = data;
          requestAnimationFrame(() => {
            if (pending && !plot && !destroyed) {
              const d = pending;
              pending = null;
              create(d);
            }
          });
          return;
        }
        create(data);
      } else {
        plot.setData(data);
      }
    },
    showNote(text) {
      note.textContent = text;
      note.hidden = !text;
      holder.hidden = Boolean(text) && !plot;
    },
    destroy() {
      destroyed = true;
      if (ro) ro.disconnect();
      if (plot) plot.destroy();
      plot = null;
    },
  };
  if (ctx) ctx.onDispose(() => api.destroy());
  return api;
}

// Merges per-GPU point lists ([[t_ms, ...], ...]) onto one time axis:
// -> {xs (seconds), ys: one array per list, values at field index `fi`
// through `map`}.
export function alignSeries(lists, fi, map = (v) => v) {
  const times = new Set();
  for (const pts of lists) for (const p of pts) if (Array.isArray(p) && typeof p[0] === "number") times.add(p[0]);
  const ts = [...times].sort((a, b) => a - b);
  const index = new Map(ts.map((t, i) => [t, i]));
  const ys = lists.map((pts) => {
    const y = new Array(ts.length).fill(null);
    for (const p of pts) {
      if (!Array.isArray(p) || !index.has(p[0])) continue;
      const v = p[fi];
      y[index.get(p[0])] = v == null || !Number.isFinite(v) ? null : map(v);
    }
    return y;
  });
  return { xs: ts.map((t) => t / 1000), ys };
}
