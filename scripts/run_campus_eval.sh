#!/usr/bin/env bash
# The campus-sharing evaluation (docs/evaluation.md, "Campus sharing"):
# `gpupool sim campus` in both modes (pooled and per-lab) over several seeds,
# then a table of mean +- sample sd over the seeds (results.md, results.csv).
# With --img DIR, the first seed's plots are copied to
# DIR/campus-{utilization,queue-delay,interactive}.svg.
#
# usage: scripts/run_campus_eval.sh [--build DIR] [--out DIR] [--seeds "42 43 ..."]
#          [--img DIR] [--aggregate-only] [-- more `gpupool sim campus` flags]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$here/../build
out=$here/../out/campus
seeds=$(seq 42 51)
img=
aggregate_only=0
extra=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --img) img=$2; shift 2 ;;
    --aggregate-only) aggregate_only=1; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
gpupool=${GPUPOOL_BIN:-$build/bin/gpupool}
mkdir -p "$out"

if [[ $aggregate_only == 0 ]]; then
  [[ -x $gpupool ]] || { echo "no gpupool binary at $gpupool (--build DIR)" >&2; exit 1; }
  for s in $seeds; do
    "$gpupool" sim campus --seed "$s" --mode both --out "$out/$s" "${extra[@]}" > "$out/$s.log"
    echo "seed $s: $(tail -1 "$out/$s.log")" >&2
  done
fi

OUT="$out" SEEDS="$(echo $seeds)" /usr/bin/python3 - <<'EOF'
import csv, json, os, statistics

out = os.environ["OUT"]
seeds = os.environ["SEEDS"].split()
runs = []
for s in seeds:
    f = os.path.join(out, s, "summary.json")
    if os.path.exists(f):
        with open(f) as fh:
            runs.append(json.load(fh))
if not runs:
    raise SystemExit("no summary.json under " + out)


def ms(xs):
    m = statistics.mean(xs)
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return m, sd


def mode(r, m):
    return r["modes"][m]


def rel(a, b):
    return 100.0 * (a - b) / b if b else float("nan")


# (label, value from one mode's summary, decimals, unit). Percentages are
# compared in points (and relatively), everything else relatively.
metrics = [
    ("GPU allocation, % of GPUs present", lambda x: x["allocation_pct"], 1, "%"),
    ("GPU utilization (work kept), % of GPUs present", lambda x: x["utilization_pct"], 1, "%"),
    ("GPU allocation while jobs wait", lambda x: x["allocation_at_saturation_pct"], 1, "%"),
    ("unallocated GPUs while jobs wait", lambda x: x["unallocated_gpus_while_waiting"], 1, ""),
    ("time with jobs waiting", lambda x: x["saturated_time_pct"], 0, "%"),
    ("interactive sessions started within 1 min", lambda x: x["interactive_within_1min_pct"], 1, "%"),
    ("interactive sessions started within 1 min, count", lambda x: x["interactive_within_1min"], 1, ""),
    ("interactive queueing delay p95",
     lambda x: x["classes"]["interactive"]["queue_delay_s"]["p95"] / 60, 1, " min"),
    ("batch (normal) queueing delay p50",
     lambda x: x["classes"]["normal"]["queue_delay_s"]["p50"] / 3600, 2, " h"),
    ("batch (normal) queueing delay p95",
     lambda x: x["classes"]["normal"]["queue_delay_s"]["p95"] / 3600, 1, " h"),
    ("batch (normal) queueing delay p99",
     lambda x: x["classes"]["normal"]["queue_delay_s"]["p99"] / 3600, 1, " h"),
    ("batch (normal) completion time p50",
     lambda x: x["classes"]["normal"]["completion_time_s"]["p50"] / 3600, 1, " h"),
    ("opportunistic queueing delay p50",
     lambda x: x["classes"]["opportunistic"]["queue_delay_s"]["p50"] / 3600, 1, " h"),
    ("preemptions", lambda x: x["preemptions"], 0, ""),
    ("GPU-hours lost to preemption", lambda x: x["lost_gpu_hours"]["preemption"], 0, ""),
    ("GPU-hours lost to providers leaving", lambda x: x["lost_gpu_hours"]["departure"], 0, ""),
    ("jobs displaced by a provider leaving", lambda x: x["displaced_jobs"], 1, ""),
    ("... of them completed",
     lambda x: 100.0 * x["displaced_jobs_completed"] / x["displaced_jobs"] if x["displaced_jobs"] else 100.0,
     1, "%"),
    ("migrations", lambda x: x["migrations"], 1, ""),
    ("Jain index, work served / demand", lambda x: x["jain_served_over_demand"], 3, ""),
    ("Jain index, GPU use / share owned", lambda x: x["jain_usage_over_share"], 3, ""),
    ("last job done, hours after start", lambda x: x["makespan_h"], 0, ""),
    ("simulation wall time", lambda x: x["sim_wall_seconds"], 2, " s"),
]

rows = []
lines = ["| metric (mean ± sd over %d seeds) | pooled | per-lab | pooled vs per-lab |" % len(runs),
         "|---|---|---|---|"]
for label, f, dec, unit in metrics:
    p = [f(mode(r, "pooled")) for r in runs]
    l = [f(mode(r, "per-lab")) for r in runs]
    pm, psd = ms(p)
    lm, lsd = ms(l)
    dm, dsd = ms([a - b for a, b in zip(p, l)])
    rels = [rel(a, b) for a, b in zip(p, l) if b]
    rtext = "%+.0f%% ± %.0f" % ms(rels) if rels else "—"
    if unit == "%":
        cmp = "%+.1f ± %.1f points (%s relative)" % (dm, dsd, rtext)
    else:
        cmp = rtext
    lines.append("| %s | %.*f ± %.*f%s | %.*f ± %.*f%s | %s |" % (
        label, dec, pm, dec, psd, unit, dec, lm, dec, lsd, unit, cmp))
    rows.append([label, pm, psd, lm, lsd, dm, dsd])
walls = [r["wall_seconds"] for r in runs]
wm, wsd = ms(walls)
lines.append("")
lines.append("Wall time per seed (generate, both modes, write outputs): %.2f ± %.2f s." % (wm, wsd))
trace = [r["trace"] for r in runs]
lines.append("Campus per seed: %.1f ± %.1f GPUs on %.1f ± %.1f nodes, %.0f ± %.0f jobs "
             "(%.0f ± %.0f sessions), %.0f ± %.0f provider departures." % (
                 *ms([t["gpus"] for t in trace]), *ms([t["nodes"] for t in trace]),
                 *ms([t["jobs"] for t in trace]), *ms([t["interactive"] for t in trace]),
                 *ms([t["node_departures"] for t in trace])))

# Labs ranked by the load they put on their own machines, busiest first.
lines.append("")
lines.append("| lab, by own load (1 = busiest) | own load | mean queueing delay, pooled | per-lab "
             "| sessions within 1 min, pooled | per-lab |")
lines.append("|---|---|---|---|---|---|")
nlabs = min(len(mode(r, "pooled")["groups"]) for r in runs)
for rank in range(nlabs):
    load, dp, dl, ip, il = [], [], [], [], []
    for r in runs:
        gp = sorted(mode(r, "pooled")["groups"], key=lambda g: -g["own_load"])
        gl = {g["group"]: g for g in mode(r, "per-lab")["groups"]}
        g = gp[rank]
        h = gl[g["group"]]
        load.append(g["own_load"])
        dp.append(g["queue_delay_s"]["mean"] / 3600)
        dl.append(h["queue_delay_s"]["mean"] / 3600)
        if g["interactive"]:
            ip.append(100.0 * g["interactive_within_1min"] / g["interactive"])
            il.append(100.0 * h["interactive_within_1min"] / h["interactive"])
    lines.append("| %d | %.2f ± %.2f | %.1f ± %.1f h | %.1f ± %.1f h | %.0f%% | %.0f%% |" % (
        rank + 1, *ms(load), *ms(dp), *ms(dl), statistics.mean(ip) if ip else 0,
        statistics.mean(il) if il else 0))

table = "\n".join(lines) + "\n"
with open(os.path.join(out, "results.md"), "w") as fh:
    fh.write(table)
with open(os.path.join(out, "results.csv"), "w", newline="") as fh:
    w = csv.writer(fh)
    w.writerow(["metric", "pooled_mean", "pooled_sd", "per_lab_mean", "per_lab_sd",
                "diff_mean", "diff_sd"])
    for row in rows:
        w.writerow([row[0]] + ["%.4f" % v for v in row[1:]])
print(table)
EOF

if [[ -n $img ]]; then
  first=$(echo $seeds | awk '{print $1}')
  mkdir -p "$img"
  for f in utilization queue-delay interactive; do
    cp "$out/$first/$f.svg" "$img/campus-$f.svg"
  done
fi
