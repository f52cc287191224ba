#!/usr/bin/env bash
# DDP step time inside the pool vs the same two processes started directly
# (issue 8; docs/performance.md, "Multi-node jobs"; target: within 2%).
# examples/distributed/train_ddp.py, 2 ranks (gloo, CPU, 1 thread each) on
# this machine: started directly as two processes with torchrun's variables,
# and as a 2-node torch job in a `gpupool dev` pool of 2 agents (the default
# executor, the sandbox, with the example directory uploaded; and the process
# executor). The runs alternate (direct, sandbox, process, direct, ...) so
# that drifting background load hits every mode alike. Each run reports its
# median step time (forward, backward with the gradient all-reduce,
# optimizer step: train_ddp.py's median_step_ms, from rank 0); the table
# shows, per mode, the median of the runs' medians, and the best run (the
# least disturbed by other load on the machine), each against direct.
# The sandbox job asks for `network: host` (the agents' policy allows it):
# in a pool on loopback every rank's node advertises 127.0.0.1, which from a
# sandbox with a network of its own is the sandbox's own loopback, so the
# ranks could not meet; with `network: host` the sandbox is isolated as it
# was before per-job networks existed, and the figure stays comparable with
# the earlier ones. (The default network's cost is net_bench.py's figure.)
# The job asks for no CPUs (the direct processes have no CPU limit either);
# `cpus=1 bench/run_ddp_bench.sh` makes each rank ask for one (a CPU quota
# where the node enforces it). While a job runs the script waits on the
# server's long poll, so that it takes no CPU from the ranks.
#
# usage: bench/run_ddp_bench.sh [--build DIR] [--runs N] [--steps N]
#                               [--model "train_ddp.py options"] [--modes "direct sandbox process"]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
build=$here/../build
runs=5
cpus=${cpus:-}
steps=100
model="--hidden 256 --layers 3 --batch 128"
modes="direct sandbox process"
# Debian's python3-torch is installed for the system Python.
py=${GPUPOOL_TORCH_PYTHON:-/usr/bin/python3}
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
# shellcheck source=bench/pool_lib.sh
source "$here/pool_lib.sh"
pool_init gpupool-ddp-bench
printf 'executors: [sandbox, process]\npolicy: {allow_host_network: true}\n' >"$agent_config"
example=$repo/examples/distributed
args="--steps $steps $model --print-params 0"

echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(free -g | awk '/^Mem:/ {print $2}') GiB, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "binary:  $gpupool; torch $("$py" -c 'import torch; print(torch.__version__)'); train_ddp.py $args"
echo

api() { curl -sf -H "Authorization: Bearer $GPUPOOL_TOKEN" "$GPUPOOL_SERVER$1"; }
# final_ms LINES: median_step_ms of the GPUPOOL_DDP_FINAL line in LINES.
final_ms() { grep -o 'GPUPOOL_DDP_FINAL .*' <<<"$1" | sed 's/^GPUPOOL_DDP_FINAL //' | jq .median_step_ms; }

run_direct() {
  local port dir pids=() rank
  port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  dir=$(mktemp -d "$tmp/direct.XXXX")
  for rank in 0 1; do
    # shellcheck disable=SC2086
    (cd "$dir" && exec env -u GPUPOOL_CHECKPOINT_DIR MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" WORLD_SIZE=2 \
      RANK=$rank LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 "$py" "$example/train_ddp.py" $args \
      --checkpoint-dir "$dir/ck$rank" >"$dir/rank$rank.out" 2>&1) &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || { echo "direct run failed:" >&2; cat "$dir"/rank*.out >&2; exit 1; }; done
  final_ms "$(cat "$dir/rank0.out")"
}

run_pool() {
  local executor=$1 spec id state
  if [[ $executor == sandbox ]]; then  # as a user submits it: the directory uploaded
    spec="{\"name\": \"ddp-bench\", \"workdir\": \"$example\", \"run\": \"exec $py train_ddp.py $args\","
    spec+=" \"network\": \"host\","
  else
    spec="{\"name\": \"ddp-bench\", \"run\": \"exec $py $example/train_ddp.py $args\","
  fi
  spec+=" \"executor\": \"$executor\", \"distributed\": \"torch\", \"resources\": {\"nodes\": 2, \"gpus\": 1${cpus:+, \"cpus\": $cpus}}}"
  echo "$spec" >"$tmp/spec.json"
  id=$("$gpupool" submit --quiet "$tmp/spec.json" | tail -1)
  # A long poll: polling in a loop would take CPU from the ranks (curl and
  # jq ten times a second cost half a core on a 2-CPU machine).
  for _ in $(seq 20); do
    state=$(api "/v1/jobs/$id?until=finished&wait=60s" | jq -r .state)
    [[ $state == succeeded || $state == failed || $state == cancelled ]] && break
  done
  [[ $state == succeeded ]] || { echo "job $id: $state" >&2; "$gpupool" logs "$id" >&2; exit 1; }
  final_ms "$(api "/v1/jobs/$id/logs?rank=0&limit=10000" | jq -r '.lines[].text')"
}

start_pool 2
declare -A per
for r in $(seq "$runs"); do
  for mode in $modes; do
    if [[ $mode == direct ]]; then v=$(run_direct); else v=$(run_pool "$mode"); fi
    per[$mode]+="$v "
    echo "run $r $mode: median step $v ms"
  done
done
stop_pool
echo
base= best_base=
vs() { [[ -n $2 ]] && awk -v m="$1" -v b="$2" 'BEGIN {printf "%+.1f%%", (m / b - 1) * 100}' || echo n/a; }
printf '%-16s %-10s %-10s %-10s %-10s %s\n' mode "step ms" "vs direct" "best ms" "vs direct" "per run (median step ms)"
for mode in $modes; do
  # shellcheck disable=SC2086
  m=$(printf '%s\n' ${per[$mode]} | median)
  # shellcheck disable=SC2086
  b=$(printf '%s\n' ${per[$mode]} | sort -g | head -1)
  [[ $mode == direct ]] && base=$m && best_base=$b
  label=$([[ $mode == direct ]] && echo "direct" || echo "pool ($mode)")
  printf '%-16s %-10s %-10s %-10s %-10s %s\n' "$label" "$m" "$(vs "$m" "$base")" "$b" "$(vs "$b" "$best_base")" "${per[$mode]}"
done
