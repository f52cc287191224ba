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

const localTime = (u, v) => (v == null ? "—" : new Date(v * 1000).toLocaleString());

// A chart of values over time inside `box`: the one way the dashboard makes
// charts (percentChart and valueChart below say how to scale and write the
// values). series: [{label, color}], height: px; y: {range (a uPlot scale
// range: [min, max] or a function), tick(v) -> text on the axis, size:
// the axis' width in px, value(v) -> text in the legend}; x: {label,
// value(u, seconds) -> the time in the legend}; utc: the time axis in UTC (days that
// are UTC days); points: show each point, not only the lines.
// Returns {setData(xsSeconds, ys[][]), showNote(text), destroy()}; ctx
// (the page's lifetime) destroys it when the page goes away.
export function timeChart(box, ctx, { series, height = 180, title, y = {}, x = {}, utc = false, points = false }) {
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
  const tick = y.tick || ((v) => String(v));
  const value = y.value || ((v) => (v == null ? "—" : String(v)));

  function width() {
    return Math.max(200, Math.floor(holder.clientWidth || box.clientWidth || 300));
  }

  function create(data) {
    const opts = {
      width: width(),
      height,
      scales: { x: { time: true }, y: y.range ? { range: y.range } : {} },
      axes: [
        { ...axis },
        { ...axis, size: y.size || 48, values: (u, vals) => vals.map(tick) },
      ],
      series: [
        { label: x.label || "Time", value: x.value || localTime },
        ...series.map((s, i) => ({
          label: s.label,
          stroke: s.color || seriesColor(i),
          width: 1.5,
          points: { show: points },
          value: (u, v) => value(v),
        })),
      ],
      cursor: { drag: { x: true, y: false } },
      legend: { show: true },
    };
    if (utc) opts.tzDate = (ts) => globalThis.uPlot.tzDate(new Date(ts * 1000), "Etc/UTC");
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

// A chart of percentages (0..100) over time: see timeChart.
export function percentChart(box, ctx, { series, height = 180, title }) {
  return timeChart(box, ctx, {
    series, height, title,
    y: { range: [0, 100], tick: (v) => v + "%", value: pct },
  });
}

// A chart of amounts over time whose scale always shows zero: see
// timeChart. format(v) writes a value in the legend, tick(v) on the axis
// (format unless given); x, utc and points as timeChart's.
export function valueChart(box, ctx, { series, height = 180, title, format = String, tick, x, utc = false, points = false }) {
  return timeChart(box, ctx, {
    series, height, title, x, utc, points,
    y: {
      range: (u, min, max) => {
        const lo = Math.min(0, min ?? 0);
        const hi = Math.max(0, max ?? 0);
        return lo === hi ? [0, 1] : globalThis.uPlot.rangeNum(lo, hi, 0.1, true);
      },
      tick: tick || format,
      size: 64,
      value: (v) => (v == null || !Number.isFinite(v) ? "—" : format(v)),
    },
  });
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
