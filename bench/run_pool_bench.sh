#!/usr/bin/env bash
# Submit-to-running latency (1 and 10 agents) and job throughput (4 agents)
# of a local pool on loopback made as `gpupool dev` makes one
# (bench/pool_lib.sh; its server without the per-token rate limit, which
# would cap the submissions at 50 a second). Every run gets a fresh pool;
# the figures are the medians over the runs. See docs/performance.md.
#
# usage: bench/run_pool_bench.sh [--build DIR] [--runs N] [--latency-jobs N]
#                                [--throughput-jobs N] [--concurrency N]
#                                [--only PARTS] [--executors "sandbox process"]
#   --only       a comma-separated list of latency1, latency10, throughput
#                (default: all three)
#   --executors  the executors the throughput part measures, in turn
#   --latency-executor E  the executor latency jobs ask for (default: the
#                node's default, the sandbox)
#   --new-connections  the load client opens a connection per call (as the
#                CLI does) instead of keeping them open
#   --perf DIR   records the server with `perf record --call-graph dwarf`
#                during each throughput run, into DIR/server-EXECUTOR-RUN.data
#                (read it with `perf report -i FILE --no-children`)
#   --perf-of W  what --perf records: `server` (default) or `agents` (the
#                agents and their shim launchers, into DIR/agents-...)
# Exits non-zero when any run failed (no RESULT line, or a job that did not
# reach running or did not succeed), after printing what the other runs gave.
# The smoke test (bench/smoke_scripts.sh pool) runs it with tiny sizes.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$here/../build
runs=3
latency_jobs=200
throughput_jobs=2000
concurrency=8
only=
executors="sandbox process"
latency_executor=
perf_dir=
perf_of=server
client_flags=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --latency-jobs) latency_jobs=$2; shift 2 ;;
    --throughput-jobs) throughput_jobs=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --executors) executors=$2; shift 2 ;;
    --latency-executor) latency_executor=$2; shift 2 ;;
    --new-connections) client_flags+=(--new-connections); shift ;;
    --perf) perf_dir=$(mkdir -p "$2" && cd "$2" && pwd); shift 2 ;;
    --perf-of) perf_of=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
# shellcheck source=bench/pool_lib.sh
source "$here/pool_lib.sh"
pool_init gpupool-pool-bench

# CPU accounting, to tell the pool's own cost from other load on the machine.
# ticks PID...: utime+stime+cutime+cstime (children: shims and jobs, once reaped).
ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14 + $15 + $16 + $17}' "/proc/$p/stat" 2>/dev/null || echo 0))); done; echo $t; }
# The agents and their children (the shim launcher, whose children's time
# holds the shims' and the jobs').
agent_tree() { local p; for p in $agent_pids; do echo "$p"; pgrep -P "$p" || true; done; }
# machine_busy: "user+system idle" jiffies of all CPUs.
machine() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8, $5 + $6}' /proc/stat; }
cpu_note() {  # cpu_note BUSY0 IDLE0 SERVER_TICKS0 AGENT_TICKS0 JOBS
  local m1 b1 i1 s1 a1
  m1=$(machine); b1=${m1% *}; i1=${m1#* }
  s1=$(ticks $server_pid); a1=$(ticks $(agent_tree))
  awk -v b0="$1" -v i0="$2" -v b1="$b1" -v i1="$i1" -v s0="$3" -v s1="$s1" -v a0="$4" -v a1="$a1" -v n="$5" \
    -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "   machine idle %.0f%% during the run; CPU per job: server %.2f ms, agents+shims+jobs %.2f ms\n",
      100 * (i1 - i0) / (b1 - b0 + i1 - i0), (s1 - s0) * 1000 / hz / n, (a1 - a0) * 1000 / hz / n}'
}

echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(free -g | awk '/^Mem:/ {print $2}') GiB"
echo "binary:  $gpupool"
echo

# latency AGENTS: `runs` runs of `latency_jobs` jobs, each on a fresh pool.
latency() {
  local agents=$1 r line
  local p50s=() p99s=() p90s=() maxs=() srv=()
  for r in $(seq "$runs"); do
    start_pool "$agents"
    m0=$(machine); s0=$(ticks $server_pid); a0=$(ticks $(agent_tree))
    rc=0
    out=$("$bench" ${client_flags[@]+"${client_flags[@]}"} ${latency_executor:+--executor "$latency_executor"} latency --jobs "$latency_jobs" 2>&1) ||
      rc=$?
    printf '%s\n' "$out" >&2
    line=$(grep '^RESULT' <<<"$out") || true
    cpu_note "${m0% *}" "${m0#* }" "$s0" "$a0" "$latency_jobs" >&2
    stop_pool
    [[ -n $line && $rc == 0 ]] || { echo "latency run $r failed" >&2; failed_runs=$((failed_runs + 1)); continue; }
    p50s+=("$(field p50_ms "$line")"); p90s+=("$(field p90_ms "$line")")
    p99s+=("$(field p99_ms "$line")"); maxs+=("$(field max_ms "$line")")
    srv+=("$(field server_p50_ms "$line")")
  done
  echo "== latency, $agents agent(s), ${latency_executor:-default} executor, $latency_jobs jobs x $runs runs: median of runs, ms:" \
    "p50 $(printf '%s\n' "${p50s[@]}" | median)  p90 $(printf '%s\n' "${p90s[@]}" | median)" \
    " p99 $(printf '%s\n' "${p99s[@]}" | median)  max $(printf '%s\n' "${maxs[@]}" | median)" \
    " (server created->started p50 $(printf '%s\n' "${srv[@]}" | median));" \
    "p50 per run: ${p50s[*]}; p99 per run: ${p99s[*]}" | tee -a "$tmp/summary"
}

# throughput EXECUTOR: jobs run by that executor (the agents allow both
# `sandbox`, the default, and `process`).
throughput() {
  local executor=$1 agents=4 r line
  local rates=() spans=() notes=()
  for r in $(seq "$runs"); do
    start_pool "$agents"
    local perf_pid=
    if [[ -n $perf_dir ]]; then
      local perf_pids=$server_pid
      [[ $perf_of == agents ]] && perf_pids=$(agent_tree | paste -sd,)
      perf record -q -F 999 --call-graph dwarf,16384 -p "$perf_pids" \
        -o "$perf_dir/$perf_of-$executor-$r.data" 2>"$perf_dir/$perf_of-$executor-$r.log" &
      perf_pid=$!
      sleep 0.5  # perf attaches
    fi
    m0=$(machine); s0=$(ticks $server_pid); a0=$(ticks $(agent_tree))
    rc=0
    out=$("$bench" ${client_flags[@]+"${client_flags[@]}"} --executor "$executor" throughput --jobs "$throughput_jobs" \
      --concurrency "$concurrency" 2>&1) || rc=$?
    if [[ -n $perf_pid ]]; then
      kill -INT "$perf_pid" 2>/dev/null || true
      wait "$perf_pid" 2>/dev/null || true
    fi
    printf '%s\n' "$out" >&2
    line=$(grep '^RESULT' <<<"$out") || true
    note=$(cpu_note "${m0% *}" "${m0#* }" "$s0" "$a0" "$throughput_jobs")
    echo "$note" >&2
    notes+=("${note#   }")
    stop_pool
    [[ -n $line && $rc == 0 ]] || { echo "throughput run $r failed" >&2; failed_runs=$((failed_runs + 1)); continue; }
    rates+=("$(field jobs_per_s "$line")"); spans+=("$(field span_s "$line")")
  done
  echo "== throughput, $executor executor, $agents agents, $throughput_jobs jobs x $runs runs: median" \
    "$(printf '%s\n' "${rates[@]}" | median) jobs/s (span $(printf '%s\n' "${spans[@]}" | median) s);" \
    "per run: ${rates[*]}" | tee -a "$tmp/summary"
  printf '   %s\n' "${notes[@]}" | tee -a "$tmp/summary"
}

# part NAME: whether --only asks for NAME.
part() { [[ -z $only || ,$only, == *,$1,* ]]; }
touch "$tmp/summary"
failed_runs=0
if part latency1; then latency 1; fi
if part latency10; then latency 10; fi
if part throughput; then for e in $executors; do throughput "$e"; done; fi
echo
echo "summary:"
cat "$tmp/summary"
if ((failed_runs > 0)); then
  echo "$failed_runs run(s) failed (see above)" >&2
  exit 1
fi
