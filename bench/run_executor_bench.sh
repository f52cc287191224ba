#!/usr/bin/env bash
# What running jobs isolated costs (docs/performance.md, "Executors"):
#   start    start latency of the process and the sandbox executor,
#            alternating in the same pool (1 agent): submit to finished of
#            `true` (the whole start and end of the command), and submit to
#            running (the agent saw the job's process forked)
#   image    the same for the first start of an image job (every job a new
#            image: copy with skopeo + unpack with umoci) and cached starts
#   cpu      CPU seconds of a CPU-bound workload in the sandbox vs run
#            directly on the host, alternating
# Medians over the runs; every run of `start` and `image` gets a fresh pool.
#
# usage: bench/run_executor_bench.sh [--build DIR] [--runs N] [--jobs N]
#                                    [--images N] [--cpu-runs N] [--only start|image|cpu]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$here/../build
runs=3
# Per round; the server's per-token rate limit (50 requests a second after a
# burst of 200) stops rounds much longer than this (each job takes a few calls).
jobs=15
images=10
cpu_runs=10
only=
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --images) images=$2; shift 2 ;;
    --cpu-runs) cpu_runs=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
# shellcheck source=bench/pool_lib.sh
source "$here/pool_lib.sh"
pool_init gpupool-executor-bench

echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(free -g | awk '/^Mem:/ {print $2}') GiB"
echo "binary:  $gpupool ($(bwrap --version), skopeo $(skopeo --version | awk '{print $3}'), umoci $(umoci --version | awk '{print $3}'))"
echo
touch "$tmp/summary"

# p50 LINE / fin50 LINE: submit-to-running / submit-to-finished p50 of a RESULT line.
p50() { field p50_ms "$(grep '^RESULT' <<<"$1")"; }
fin50() { field finished_p50_ms "$(grep '^RESULT' <<<"$1")"; }

# Jobs run `true`: submit-to-finished then covers the whole start (and end)
# of the job's command under its executor; submit-to-running is when the
# agent reports the job's process forked.
start_latency() {
  local r e proc=() sand=() procf=() sandf=() out
  for r in $(seq "$runs"); do
    start_pool 1
    for e in process sandbox process sandbox; do
      out=$("$bench" --executor "$e" latency --jobs "$jobs" --run true 2>&1)
      if [[ $e == process ]]; then proc+=("$(p50 "$out")"); procf+=("$(fin50 "$out")")
      else sand+=("$(p50 "$out")"); sandf+=("$(fin50 "$out")"); fi
    done
    stop_pool
  done
  local pm sm pf sf
  pm=$(printf '%s\n' "${proc[@]}" | median); sm=$(printf '%s\n' "${sand[@]}" | median)
  pf=$(printf '%s\n' "${procf[@]}" | median); sf=$(printf '%s\n' "${sandf[@]}" | median)
  echo "== start: p50 of $jobs \`true\` jobs x $((2 * runs)) rounds, median of rounds:" \
    "submit-to-finished process $pf ms, sandbox $sf ms (the sandbox adds" \
    "$(awk -v a="$sf" -v b="$pf" 'BEGIN {printf "%.1f", a - b}') ms);" \
    "submit-to-running process $pm ms, sandbox $sm ms;" \
    "finished per round: process ${procf[*]}, sandbox ${sandf[*]}" | tee -a "$tmp/summary"
}

image_latency() {
  local i r out first=() cached=() sand=()
  # A root agent pulls as the task's account, which must read the images.
  chmod 755 "$tmp"
  for i in $(seq "$images"); do
    "$here/../tests/images/make_test_image.sh" "$tmp/img$i" "BENCH_IMAGE=$i" >/dev/null
  done
  for r in $(seq "$runs"); do
    start_pool 1
    out=$("$bench" --executor sandbox latency --jobs "$jobs" --run true 2>&1); sand+=("$(fin50 "$out")")
    for i in $(seq "$images"); do  # each a new image: a copy and an unpack
      out=$("$bench" --executor sandbox --image "oci-archive:$tmp/img$i/busybox.tar" latency --jobs 1 \
        --run true 2>&1)
      first+=("$(fin50 "$out")")
    done
    out=$("$bench" --executor sandbox --image "oci-archive:$tmp/img1/busybox.tar" latency --jobs "$jobs" \
      --run true 2>&1)
    cached+=("$(fin50 "$out")")
    stop_pool
  done
  local fm cm sm
  fm=$(printf '%s\n' "${first[@]}" | median); cm=$(printf '%s\n' "${cached[@]}" | median)
  sm=$(printf '%s\n' "${sand[@]}" | median)
  echo "== image: submit-to-finished p50 of \`true\` (busybox image, 1 layer, 1.9 MiB): first start $fm ms" \
    "(median of $((images * runs)) new images), cached $cm ms, sandbox without an image $sm ms;" \
    "a cached start adds $(awk -v a="$cm" -v b="$sm" 'BEGIN {printf "%.1f", a - b}') ms;" \
    "cached per run: ${cached[*]}" | tee -a "$tmp/summary"
}

cpu_overhead() {
  # A fixed CPU-bound workload (SHA-256 over 2 GB in Python) that prints its
  # own CPU seconds (user + system).
  local work="import hashlib, time
t = time.process_time()
b = b'x' * 1000000
for _ in range(2000):
    hashlib.sha256(b).digest()
print('cpu=%.4f' % (time.process_time() - t))"
  printf 'name: cpu\nexecutor: sandbox\ncommand: [/usr/bin/python3, -c, %s]\n' \
    "$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$work")" >"$tmp/cpu.yaml"
  start_pool 1
  local r direct=() sandbox=() out
  for r in $(seq "$cpu_runs"); do
    out=$(/usr/bin/python3 -c "$work"); direct+=("${out#cpu=}")
    out=$("$gpupool" submit --follow "$tmp/cpu.yaml" 2>/dev/null | grep '^cpu='); sandbox+=("${out#cpu=}")
  done
  stop_pool
  local dm sm
  dm=$(printf '%s\n' "${direct[@]}" | median); sm=$(printf '%s\n' "${sandbox[@]}" | median)
  echo "== cpu: CPU seconds of SHA-256 over 2 GB, median of $cpu_runs alternating runs: direct $dm s," \
    "sandbox $sm s, ratio $(awk -v a="$sm" -v b="$dm" 'BEGIN {printf "%.4f", a / b}');" \
    "direct: ${direct[*]}; sandbox: ${sandbox[*]}" | tee -a "$tmp/summary"
}

if [[ -z $only || $only == start ]]; then start_latency; fi
if [[ -z $only || $only == image ]]; then image_latency; fi
if [[ -z $only || $only == cpu ]]; then cpu_overhead; fi
echo
echo "summary:"
cat "$tmp/summary"
