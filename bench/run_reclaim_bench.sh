#!/usr/bin/env bash
# How fast a provider gets its GPU back (docs/performance.md, "Provider
# reclaim"). A `gpupool dev` pool with 2 agents (1 simulated GPU each, the
# sandbox executor, policy reclaim_grace G); each run starts one job, then
# times `gpupool agent reclaim` on the job's agent from the command's start
# until it returns (it returns once every vacated job's processes are gone,
# which the script checks), and how long until the displaced job
# runs again on the other agent. Then `resume`, cancel, next run.
#   now        reclaim --now, a job that ignores SIGTERM (target < 1 s)
#   polite     graceful reclaim, a job that exits on SIGTERM (target < G + 2 s)
#   stubborn   graceful reclaim, a job that ignores SIGTERM: the whole grace,
#              then SIGKILL (target < G + 2 s)
# Medians (and max) over the runs.
#
# usage: bench/run_reclaim_bench.sh [--build DIR] [--runs N] [--grace SECONDS] [--only now|polite|stubborn]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$here/../build
runs=10
grace=5
only=
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --grace) grace=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
# shellcheck source=bench/pool_lib.sh
source "$here/pool_lib.sh"
pool_init gpupool-reclaim-bench
printf 'executors: [sandbox]\npolicy: {reclaim_grace: %ss}\n' "$grace" >"$agent_config"

echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(free -g | awk '/^Mem:/ {print $2}') GiB"
echo "binary:  $gpupool; reclaim_grace ${grace}s; $runs runs per case"
echo

ms() { echo $(($(date +%s%N) / 1000000)); }
api() { curl -sf -H "Authorization: Bearer $GPUPOOL_TOKEN" "$GPUPOOL_SERVER$1"; }
# job_field ID JQ: a field of the job.
job_field() { api "/v1/jobs/$1" | jq -r "$2"; }
# wait_running ID N: until the job's N-th attempt runs; prints its node id.
wait_running() {
  local node
  for _ in $(seq 2000); do
    node=$(job_field "$1" "if .state == \"running\" and (.attempt_list | length) == $2 then .attempt_list[-1].node_id else empty end")
    [[ -n $node ]] && { echo "$node"; return; }
    sleep 0.01
  done
  echo "job $1 attempt $2 never ran" >&2
  return 1
}

# reclaim_case NAME FLAGS JOB_SCRIPT
reclaim_case() {
  local name=$1 flags=$2 script=$3 r id node agent t0 t1 t2 marker
  local cmd_ms=() rerun_ms=()
  start_pool 2
  local data=$pool_dir/data
  for r in $(seq "$runs"); do
    marker="reclaim-bench-$name-$r-$$"
    id=$(gpupool_submit "$marker" "$script")
    node=$(wait_running "$id" 1)
    agent=$(api /v1/nodes | jq -r ".nodes[] | select(.id == \"$node\") | .name")
    # This attempt's processes (the next attempt, elsewhere, has new ones).
    local pids
    pids=$(pgrep -f -- "$marker" | tr '\n' ' ')
    t0=$(ms)
    # shellcheck disable=SC2086
    "$gpupool" agent reclaim $flags --data-dir "$data/agent-${agent#dev-agent-}" >/dev/null
    t1=$(ms)
    for pid in $pids; do
      if kill -0 "$pid" 2>/dev/null; then
        echo "run $r: process $pid of the job outlived the reclaim" >&2
        exit 1
      fi
    done
    wait_running "$id" 2 >/dev/null
    t2=$(ms)
    cmd_ms+=($((t1 - t0)))
    rerun_ms+=($((t2 - t0)))
    "$gpupool" agent resume --data-dir "$data/agent-${agent#dev-agent-}" >/dev/null
    "$gpupool" cancel "$id" >/dev/null
    sleep 0.5
  done
  stop_pool
  local sorted
  sorted=$(printf '%s\n' "${cmd_ms[@]}" | sort -n)
  echo "== $name (reclaim $flags): command until the GPU is free, ms: median $(printf '%s\n' "${cmd_ms[@]}" | median)" \
    " max $(tail -1 <<<"$sorted"); displaced job running again on the other agent, ms: median" \
    "$(printf '%s\n' "${rerun_ms[@]}" | median); per run: ${cmd_ms[*]}" | tee -a "$tmp/summary"
}

gpupool_submit() {
  "$gpupool" submit --name "$1" --gpus 1 -- sh -c "$2 # $1" 2>/dev/null
}

touch "$tmp/summary"
ignore_term="trap '' TERM; while :; do sleep 0.05; done"
exit_on_term="trap 'exit 0' TERM; while :; do sleep 0.05; done"
if [[ -z $only || $only == now ]]; then reclaim_case now --now "$ignore_term"; fi
if [[ -z $only || $only == polite ]]; then reclaim_case polite "" "$exit_on_term"; fi
if [[ -z $only || $only == stubborn ]]; then reclaim_case stubborn "" "$ignore_term"; fi
echo
echo "summary:"
cat "$tmp/summary"
