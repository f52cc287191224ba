#!/usr/bin/env bash
# How long a multi-node (gang) job takes to start (issue 8; docs/performance.md,
# "Multi-node jobs"). A `gpupool dev` pool with 4 agents on this machine
# (loopback, 8 simulated GPUs each, the process executor). Each run submits
# a torch gang of N ranks (resources: {nodes: N, gpus: 1}) that sleeps, and
# reads from the API when the job was created and when it started (the job
# turns running once every rank runs); it also times the same from here,
# from the submit request until the job is seen running (polled every 10
# ms), and checks that every rank then runs. Then the job is cancelled and
# waited for. A single-node job (N = 1) is the baseline.
# Medians (and min, max) over the runs.
#
# usage: bench/run_gang_start_bench.sh [--build DIR] [--runs N] [--ranks "1 2 4"]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$here/../build
runs=10
ranks="1 2 4"
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
# shellcheck source=bench/pool_lib.sh
source "$here/pool_lib.sh"
pool_init gpupool-gang-start-bench
agents=0
for n in $ranks; do ((n > agents)) && agents=$n; done

echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(free -g | awk '/^Mem:/ {print $2}') GiB, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "binary:  $gpupool; $agents agents on loopback; $runs runs per size"
echo

ms() { echo $(($(date +%s%N) / 1000000)); }
api() { curl -sf -H "Authorization: Bearer $GPUPOOL_TOKEN" "$GPUPOOL_SERVER$1"; }
post() { curl -sf -H "Authorization: Bearer $GPUPOOL_TOKEN" -H 'Content-Type: application/json' -X POST -d "$2" "$GPUPOOL_SERVER$1"; }

start_pool "$agents"
printf '%-6s %-26s %-26s\n' ranks "created->started ms (API)" "submit->seen running ms"
printf '%-6s %-26s %-26s\n' "" "median [min, max]" "median [min, max]"
for n in $ranks; do
  api_ms=() seen_ms=()
  if ((n > 1)); then res="{\"nodes\": $n, \"gpus\": 1}"; else res='{"gpus": 1}'; fi
  for r in $(seq "$runs"); do
    spec="{\"name\": \"gang-start-$n-$r\", \"run\": \"exec sleep 60\", \"executor\": \"process\", \"resources\": $res}"
    t0=$(ms)
    id=$(post /v1/jobs "$spec" | jq -r .id)
    job=
    for _ in $(seq 3000); do
      job=$(api "/v1/jobs/$id")
      [[ $(jq -r .state <<<"$job") == running ]] && break
      sleep 0.01
    done
    t1=$(ms)
    [[ $(jq -r .state <<<"$job") == running ]] || { echo "job $id never ran: $job" >&2; exit 1; }
    if ((n > 1)); then
      live=$(jq '[.attempt_list[-1].ranks[] | select(.state == "running")] | length' <<<"$job")
      [[ $live == "$n" ]] || { echo "job $id is running with $live of $n ranks running: $job" >&2; exit 1; }
    fi
    api_ms+=($(jq '.started_ms - .created_ms' <<<"$job"))
    seen_ms+=($((t1 - t0)))
    post "/v1/jobs/$id/cancel" '{}' >/dev/null
    for _ in $(seq 3000); do
      [[ $(api "/v1/jobs/$id" | jq -r .state) == cancelled ]] && break
      sleep 0.02
    done
    sleep 0.3  # the agents report the ranks gone and their GPUs free
  done
  stats() { local s; s=$(printf '%s\n' "$@" | sort -g); echo "$(printf '%s\n' "$@" | median) [$(head -1 <<<"$s"), $(tail -1 <<<"$s")]"; }
  printf '%-6s %-26s %-26s\n' "$n" "$(stats "${api_ms[@]}")" "$(stats "${seen_ms[@]}")"
  echo "$n ranks, per run: API ${api_ms[*]}; seen ${seen_ms[*]}" >>"$tmp/detail"
done
stop_pool
echo
touch "$tmp/detail"; cat "$tmp/detail"
