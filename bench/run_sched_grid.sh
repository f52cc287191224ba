#!/usr/bin/env bash
# The scheduler's cost grid (docs/performance.md, "Scheduler"): one
# sched::Scheduler::Decide pass on generated snapshots of 1k, 10k and 50k GPUs
# with 1k, 10k and 100k pending jobs, median of N repetitions, as JSON; then
# a Markdown table and the SVG plot (scripts/plot_sched_cost.py).
#
# usage: bench/run_sched_grid.sh [--build DIR] [--out DIR] [--svg FILE]
#          [--repetitions N] [--filter REGEX]
#   --build        build directory holding bin/gpupool-sched-bench (default build)
#   --out          where grid.json and grid.md go (default out/sched-grid)
#   --svg          the plot (default docs/img/sched-cost.svg)
#   --repetitions  default 3
#   --filter       a Google Benchmark filter (default ^BM_Decide/, the grid)
# Build first: ninja -C build gpupool-sched-bench. Takes 1-2 minutes with 3-5 repetitions.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=$root/build
out=$root/out/sched-grid
svg=$root/docs/img/sched-cost.svg
repetitions=3
filter='^BM_Decide/'
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --svg) svg=$2; shift 2 ;;
    --repetitions) repetitions=$2; shift 2 ;;
    --filter) filter=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
bench=$build/bin/gpupool-sched-bench
[[ -x $bench ]] || { echo "no $bench (ninja -C $build gpupool-sched-bench)" >&2; exit 1; }
mkdir -p "$out" "$(dirname "$svg")"

echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
"$bench" --benchmark_filter="$filter" --benchmark_repetitions="$repetitions" \
  --benchmark_report_aggregates_only=true \
  --benchmark_out="$out/grid.json" --benchmark_out_format=json
/usr/bin/python3 "$root/scripts/plot_sched_cost.py" "$out/grid.json" --svg "$svg" --table "$out/grid.md"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "wrote $out/grid.json, $out/grid.md and $svg"
