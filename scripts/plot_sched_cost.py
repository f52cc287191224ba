#!/usr/bin/env python3
"""Turns the scheduler grid's Google Benchmark JSON into an SVG and a table.

usage: scripts/plot_sched_cost.py GRID.json [--svg docs/img/sched-cost.svg]
                                  [--table FILE.md]

GRID.json comes from bench/run_sched_grid.sh (gpupool-sched-bench
--benchmark_filter=^BM_Decide/ --benchmark_repetitions=N
--benchmark_report_aggregates_only=true --benchmark_format=json). The
medians of BM_Decide/gpus:G/pending:P are used. The SVG has two log-log
panels against the cluster's GPUs, one line per queue length: the Decide
time per pending job considered (pass time / P) and the time per placement
(1 / placements per second). The table (Markdown, printed and optionally
written) has the pass time, placements, placements/s, us per job and the
heap figures. Python 3 standard library only; the SVG is written by hand.
"""

import argparse
import json
import math
import re
import sys

NAME = re.compile(r"^BM_Decide/gpus:(\d+)/pending:(\d+)$")
TO_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
# Placement rates to compare with (docs/performance.md), drawn as seconds per
# placement on the right panel.
REFERENCES = [
    ("target 20,000/s", 20000),
    ("Nomad C1M 3,750/s", 3750),
    ("kube-scheduler 810/s", 810),
    ("Slurm ~500/s", 500),
]


def load(path):
    with open(path) as f:
        doc = json.load(f)
    rows = {}
    for b in doc["benchmarks"]:
        m = NAME.match(b.get("run_name", b["name"]))
        if not m:
            continue
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        if b.get("error_occurred"):
            sys.exit(f"{b['name']}: {b.get('error_message')}")
        gpus, pending = int(m.group(1)), int(m.group(2))
        # A median overrides a single run of the same point.
        if (gpus, pending) in rows and b.get("run_type") != "aggregate":
            continue
        unit = TO_SECONDS[b.get("time_unit", "ns")]
        rows[(gpus, pending)] = {
            "gpus": gpus,
            "pending": pending,
            "pass_s": b["cpu_time"] * unit,
            "real_s": b["real_time"] * unit,
            "placed": b.get("placed/pass", 0.0),
            "rate": b.get("placements/s", 0.0),
            "per_job_s": b.get("s/job", b["cpu_time"] * unit / pending),
            "free_gpus": b.get("free_gpus", 0.0),
            "asked_gpus": b.get("asked_gpus", 0.0),
            "left_gpus": b.get("left_gpus", 0.0),
            "peak_b": b.get("peak_B", 0.0),
            "warm_peak_b": b.get("warm_peak_B", 0.0),
            "b_per_gpu": b.get("B/gpu", 0.0),
            "b_per_job": b.get("B/job", 0.0),
            "allocs": b.get("allocs/pass", 0.0),
            "snapshot_b": b.get("snapshot_B", 0.0),
            "reps": b.get("repetitions", 1),
        }
    if not rows:
        sys.exit(f"{path}: no BM_Decide/gpus:G/pending:P results")
    return doc.get("context", {}), rows


def si(x):
    """12,300 -> '12.3k', 0.5 -> '0.5'."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.3g}"


def duration(s):
    """Seconds as '850 ns', '12.3 us', '4.5 ms', '1.2 s'."""
    for div, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if s >= div:
            return f"{s / div:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def memory_fit(rows):
    """Least squares of peak heap = a * GPUs + b * pending + c, or None."""
    pts = [(r["gpus"], r["pending"], r["peak_b"]) for r in rows.values() if r["peak_b"] > 0]
    if len(pts) < 3 or len({g for g, _, _ in pts}) < 2 or len({p for _, p, _ in pts}) < 2:
        return None
    # Normal equations for [a, b, c], solved by Gaussian elimination.
    m = [[0.0] * 4 for _ in range(3)]
    for g, p, y in pts:
        row = (g, p, 1.0)
        for i in range(3):
            for j in range(3):
                m[i][j] += row[i] * row[j]
            m[i][3] += row[i] * y
    for col in range(3):
        piv = max(range(col, 3), key=lambda r: abs(m[r][col]))
        m[col], m[piv] = m[piv], m[col]
        for r in range(3):
            if r != col and m[col][col]:
                f = m[r][col] / m[col][col]
                m[r] = [a - f * b for a, b in zip(m[r], m[col])]
    return tuple(m[i][3] / m[i][i] for i in range(3))


def table(rows):
    out = [
        "| GPUs | pending | pass time | placed / pass | placements/s | µs per job considered "
        "| GPUs free before → after / asked | peak heap (first pass) | B per GPU | B per job |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key in sorted(rows):
        r = rows[key]
        out.append(
            f"| {r['gpus']:,} | {r['pending']:,} | {duration(r['pass_s'])} | {r['placed']:,.0f} "
            f"| {r['rate']:,.0f} | {r['per_job_s'] * 1e6:.2f} "
            f"| {r['free_gpus']:,.0f} → {r['left_gpus']:,.0f} / {r['asked_gpus']:,.0f} "
            f"| {r['peak_b'] / 2**20:,.1f} MiB | {r['b_per_gpu']:,.0f} | {r['b_per_job']:,.0f} |"
        )
    return "\n".join(out)


class Panel:
    """One log-log plot area."""

    def __init__(self, x0, y0, w, h, xs, ys):
        self.x0, self.y0, self.w, self.h = x0, y0, w, h
        self.xlo, self.xhi = self.decades(xs)
        self.ylo, self.yhi = self.decades(ys)

    @staticmethod
    def decades(values):
        lo = math.floor(math.log10(min(values)))
        hi = math.ceil(math.log10(max(values)))
        return lo, max(hi, lo + 1)

    def x(self, v):
        return self.x0 + (math.log10(v) - self.xlo) / (self.xhi - self.xlo) * self.w

    def y(self, v):
        return self.y0 + self.h - (math.log10(v) - self.ylo) / (self.yhi - self.ylo) * self.h


def line(x1, y1, x2, y2, stroke, extra=""):
    return (
        f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
        f'stroke="{stroke}"{extra}/>'
    )


def text(x, y, body, anchor="start", extra=""):
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>{body}</text>'


def svg(context, rows, path):
    queues = sorted({p for _, p in rows})
    gpus = sorted({g for g, _ in rows})
    per_job = [r["per_job_s"] for r in rows.values()]
    per_place = [1 / r["rate"] for r in rows.values() if r["rate"] > 0]
    per_place += [1 / rate for _, rate in REFERENCES]
    width, height = 960, 470
    panels = [
        ("Decide time per pending job considered", "per_job_s", per_job),
        ("Decide time per placement (1 / placements per second)", "per_place", per_place),
    ]
    e = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        text(
            20,
            24,
            "gpupool scheduler: cost of one Decide pass, by cluster size and queue length "
            "(median of the repetitions, log-log)",
            extra=' font-size="15"',
        ),
    ]
    for i, (title, field, values) in enumerate(panels):
        p = Panel(85 + i * 470, 60, 360, 320, gpus, values)
        right, bottom = p.x0 + p.w, p.y0 + p.h
        e.append(text(p.x0, p.y0 - 10, title, extra=' font-size="13"'))
        for d in range(p.ylo, p.yhi + 1):
            v = 10.0**d
            e.append(line(p.x0, p.y(v), right, p.y(v), "#ddd"))
            e.append(text(p.x0 - 6, p.y(v) + 4, duration(v), "end"))
            if d < p.yhi:
                for k in range(2, 10):
                    e.append(line(p.x0, p.y(k * v), right, p.y(k * v), "#f2f2f2"))
        for d in range(p.xlo, p.xhi + 1):
            e.append(line(p.x(10.0**d), p.y0, p.x(10.0**d), bottom, "#ddd"))
        for g in gpus:
            e.append(text(p.x(g), bottom + 16, si(g), "middle"))
        e.append(
            f'<rect x="{p.x0}" y="{p.y0}" width="{p.w}" height="{p.h}" fill="none" stroke="#888"/>'
        )
        e.append(text(p.x0 + p.w / 2, bottom + 34, "GPUs in the cluster (8 per node)", "middle"))
        if field == "per_place":
            for label, rate in REFERENCES:
                yy = p.y(1 / rate)
                e.append(line(p.x0, yy, right, yy, "#777", ' stroke-dasharray="5,4"'))
                e.append(
                    text(
                        right - 4,
                        yy - 4,
                        label,
                        "end",
                        ' fill="#555" font-size="11" paint-order="stroke" stroke="white"'
                        ' stroke-width="3"',
                    )
                )
        for j, q in enumerate(queues):
            colour = COLOURS[j % len(COLOURS)]
            pts = []
            for g in gpus:
                r = rows.get((g, q))
                if r is None:
                    continue
                if field == "per_job_s":
                    v = r["per_job_s"]
                else:
                    v = 1 / r["rate"] if r["rate"] else None
                if v:
                    pts.append((p.x(g), p.y(v)))
            if len(pts) > 1:
                d = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
                e.append(f'<polyline points="{d}" fill="none" stroke="{colour}" stroke-width="2"/>')
            for x, y in pts:
                e.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}"/>')
    # The legend, under the panels.
    for j, q in enumerate(queues):
        colour = COLOURS[j % len(COLOURS)]
        x = 85 + j * 170
        e.append(line(x, height - 42, x + 24, height - 42, colour, ' stroke-width="2"'))
        e.append(f'<circle cx="{x + 12}" cy="{height - 42}" r="3.5" fill="{colour}"/>')
        e.append(text(x + 30, height - 38, f"{si(q)} pending jobs"))
    machine = (
        f"{context.get('num_cpus', '?')} CPUs at {context.get('mhz_per_cpu', '?')} MHz, "
        f"{context.get('date', '')[:10]}; one core; CPU time; "
        f"repetitions {max(r['reps'] for r in rows.values())}"
    )
    e.append(text(width - 20, height - 12, machine, "end", ' fill="#555"'))
    e.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(e) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json")
    ap.add_argument("--svg")
    ap.add_argument("--table")
    args = ap.parse_args()
    context, rows = load(args.json)
    text = table(rows)
    fit = memory_fit(rows)
    if fit:
        text += (
            f"\n\nPeak heap of a first pass, least squares over the grid: "
            f"{fit[0]:,.0f} B per GPU x GPUs + {fit[1]:,.0f} B per pending job x pending "
            f"+ {fit[2] / 2**20:,.2f} MiB."
        )
    print(text)
    if args.table:
        with open(args.table, "w") as f:
            f.write(text + "\n")
    if args.svg:
        svg(context, rows, args.svg)
        print(f"wrote {args.svg}", file=sys.stderr)


if __name__ == "__main__":
    main()
