#!/usr/bin/env bash
# Smoke runs of the benchmark scripts (CTest, label `integration`; registered
# in bench/CMakeLists.txt as bench_script_smoke_NAME), so that none of them
# breaks silently against today's pool and CLI. Each runs one script with
# tiny sizes against the build's binaries and passes when the script
# completed and reported its figures (the lines its users read, with a
# number in them), and the jobs it ran reached the state it expects. Never a
# timing: the figures are only checked to be there (and positive where zero
# would mean nothing was measured).
#
#   smoke_scripts.sh NAME BUILD_DIR
#
# NAME is one of: pool, pool-tls, executor, gang, reclaim, agent-load,
# sched-grid, openb, upload, ddp, tunnel, migration, net, flood, dashboard. (run_chaos.sh
# has none: it is test_chaos.py, which the suite runs as
# integration_test_chaos.) They need what the end-to-end tests need (root,
# scripts/setup.sh's packages: bubblewrap, skopeo, umoci, rsync, PyTorch CPU,
# Jupyter, network namespaces).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
name=$1
build=$(cd "$2" && pwd)
tmp=$(mktemp -d "/tmp/gpupool-script-smoke-$name.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
log=$tmp/log
py=/usr/bin/python3
# No CLI config file of the user's: only what each smoke passes.
export GPUPOOL_CONFIG=$tmp/no-config.json
# A number as the scripts print them (no group: positive() reads the first).
num='[0-9]+[.]?[0-9]*'

# run CMD...: runs the benchmark, its output into $log; fails (showing the
# output) when it exits non-zero.
run() {
  echo "+ $*"
  local rc=0
  "$@" >"$log" 2>&1 || rc=$?
  if ((rc != 0)); then
    cat "$log"
    echo "SMOKE FAILED: the benchmark exited $rc"
    exit 1
  fi
}
# expect ERE...: every ERE matches a line of the output.
expect() {
  local re
  for re in "$@"; do
    grep -Eq -- "$re" "$log" || { cat "$log"; echo "SMOKE FAILED: no line matches: $re"; exit 1; }
  done
}
# positive ERE: the first line matching ERE, whose first group is a number,
# has that number above zero (a figure was measured, not "0" or "n/a").
positive() {
  local line v
  line=$(grep -Eo -- "$1" "$log" | head -1) || true
  [[ -n $line && $line =~ $1 ]] || { cat "$log"; echo "SMOKE FAILED: no line matches: $1"; exit 1; }
  v=${BASH_REMATCH[1]}
  awk -v v="$v" 'BEGIN { exit !(v + 0 > 0) }' ||
    { cat "$log"; echo "SMOKE FAILED: $v is not a positive figure in: $line"; exit 1; }
}

case $name in
  pool)
    # Latency with 1 agent, and throughput with each executor.
    run "$here/run_pool_bench.sh" --build "$build" --runs 1 --latency-jobs 3 --throughput-jobs 20 \
      --only latency1,throughput
    expect '^RESULT latency jobs=3 .* timeouts=0 errors=0$' \
      '^RESULT throughput jobs=20 .* succeeded=20 errors=0$' \
      '^== throughput, sandbox executor, 4 agents'
    positive "^== latency, 1 agent\\(s\\), default executor, 3 jobs x 1 runs: median of runs, ms: p50 ($num)"
    positive "^== throughput, process executor, 4 agents, 20 jobs x 1 runs: median ($num) jobs/s"
    # The agents' side (tens of ms a sandboxed job): the server's own can be
    # under one clock tick (10 ms) for the latency run's 3 jobs, and read 0.
    positive "^   machine idle $num% during the run; CPU per job: server $num ms, agents\\+shims\\+jobs ($num) ms"
    ;;
  pool-tls)
    # gpupool-pool-bench trusts a TLS pool only through its CA, as the CLI:
    # pinned (GPUPOOL_CA_FINGERPRINT) or as a CA file (--ca-file); without
    # either, pinned to another CA, or told `insecure` by a config file, it
    # must refuse the server.
    bench=$build/bin/gpupool-pool-bench
    "$build/bin/gpupool" dev --agents 1 --simulate-gpus 1xA100:80GiB --listen 127.0.0.1:0 \
      --data-dir "$tmp/pool" --env-file "$tmp/env" --no-config --log-level warn >"$tmp/dev.log" 2>&1 &
    dev_pid=$!
    trap 'kill -TERM $dev_pid 2>/dev/null; wait $dev_pid 2>/dev/null; rm -rf "$tmp"' EXIT
    for _ in $(seq 300); do [[ -s $tmp/env ]] && break; sleep 0.1; done
    [[ -s $tmp/env ]] || { cat "$tmp/dev.log"; echo "SMOKE FAILED: gpupool dev did not start"; exit 1; }
    # shellcheck disable=SC1091
    source "$tmp/env"
    [[ $GPUPOOL_SERVER == https://* ]] || { echo "SMOKE FAILED: the dev pool is not TLS: $GPUPOOL_SERVER"; exit 1; }
    export GPUPOOL_SERVER GPUPOOL_TOKEN
    pin=$GPUPOOL_CA_FINGERPRINT
    unset GPUPOOL_CA_FINGERPRINT
    run "$bench" --ca-file "$tmp/pool/server/tls/ca.crt" latency --jobs 1 --gpus 0 --run true
    expect '^RESULT latency jobs=1 .* timeouts=0 errors=0$'
    run env GPUPOOL_CA_FINGERPRINT="$pin" "$bench" throughput --jobs 2 --concurrency 1
    expect '^RESULT throughput jobs=2 .* succeeded=2 errors=0$'
    # A CLI config file that marks this server `insecure` (as `gpupool login
    # --insecure` stores it) must not switch verification off either.
    printf '{"servers": {"%s": {"insecure": true}}}\n' "$GPUPOOL_SERVER" >"$tmp/insecure.json"
    for refused in "" "--ca-fingerprint sha256:$(printf '%064d' 0)" "config"; do
      rc=0
      if [[ $refused == config ]]; then
        GPUPOOL_CONFIG=$tmp/insecure.json "$bench" latency --jobs 1 --gpus 0 --run true >"$log" 2>&1 || rc=$?
      else
        # shellcheck disable=SC2086
        "$bench" $refused latency --jobs 1 --gpus 0 --run true >"$log" 2>&1 || rc=$?
      fi
      cat "$log"
      ((rc != 0)) || { echo "SMOKE FAILED: pool-bench (${refused:-without a CA}) reached the pool"; exit 1; }
      expect 'certificate' '^latency: no job reached running$'
    done
    echo "smoke $name: passed"
    exit 0
    ;;
  executor)
    run "$here/run_executor_bench.sh" --build "$build" --runs 1 --jobs 2 --images 1 --cpu-runs 1
    positive "^== start: .* submit-to-finished process ($num) ms"
    positive "^== start: .* sandbox ($num) ms \\(the sandbox adds"
    positive "^== image: .* first start ($num) ms"
    positive "^== image: .* cached ($num) ms"
    positive "^== cpu: .* direct ($num) s"
    positive "^== cpu: .* sandbox ($num) s"
    ;;
  gang)
    # The script fails by itself when a gang never runs or runs short of ranks.
    run "$here/run_gang_start_bench.sh" --build "$build" --runs 1 --ranks "1 2"
    positive "^1 ranks, per run: API $num; seen ($num)$"
    positive "^2 ranks, per run: API $num; seen ($num)$"
    ;;
  reclaim)
    # The script fails by itself when a job's process outlives the reclaim
    # or the displaced job never runs again.
    run "$here/run_reclaim_bench.sh" --build "$build" --runs 1 --grace 1 --only now
    positive "^== now \\(reclaim --now\\): command until the GPU is free, ms: median ($num)"
    positive "^== now .* displaced job running again on the other agent, ms: median ($num)"
    ;;
  agent-load)
    run "$here/run_agent_load.sh" --build "$build" --agents 20 --heartbeat-ms 500 --samples 1 \
      --window-s 2 --warmup-s 0 --ramp-per-s 100 --scrape-s 0.5
    expect '^all 20 agents welcomed after' '^   no agent was disconnected during the run$' \
      'final .* welcomed=20 connected=20 .* disconnects=0'
    positive "^== 20 agents, .* server RSS median ($num) MiB"
    positive "^scrapes: .* median ($num) bytes"
    ;;
  sched-grid)
    run "$here/run_sched_grid.sh" --build "$build" --out "$tmp/grid" --svg "$tmp/grid/cost.svg" \
      --repetitions 1 --filter '^BM_Decide/gpus:1000/pending:1000$'
    [[ -s $tmp/grid/grid.json && -s $tmp/grid/cost.svg ]] || { cat "$log"; echo "SMOKE FAILED: no JSON or SVG"; exit 1; }
    cp "$tmp/grid/grid.md" "$log"
    positive "^\\| 1,000 \\| 1,000 \\| $num [mµ]?s \\| ([0-9,]+) \\|"
    ;;
  openb)
    # A tiny trace in the openb format (4 nodes, 24 pods), two policies x
    # two seeds: the matrix, its table and its plot.
    data=$tmp/openb
    mkdir -p "$data"
    {
      echo "sn,cpu_milli,memory_mib,gpu,model"
      for i in 0 1 2 3; do echo "openb-node-000$i,32000,131072,4,V100M32"; done
    } >"$data/openb_node_list_gpu_node.csv"
    {
      echo "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
      for i in $(seq 0 23); do
        # Whole GPUs (a multi-GPU pod asks 1000 milli each) and half GPUs.
        gpus=$((i % 3 == 0 ? 2 : 1)); milli=$((gpus > 1 || i % 2 == 0 ? 1000 : 500))
        printf 'openb-pod-%04d,%d,%d,%d,%d,,LS,Running,%d,%d,%d\n' "$i" 4000 8192 "$gpus" "$milli" \
          $((i * 1000)) $((i * 1000 + 500000)) $((i * 1000))
      done
    } >"$data/openb_pod_list_tiny.csv"
    run "$here/run_openb_matrix.sh" --build "$build" --data "$data" --out "$tmp/out" \
      --policies "best-fit fgd" --traces tiny --seeds "42 43" --plot-trace tiny
    [[ -s $tmp/out/results.csv && -s $tmp/out/openb-tiny.svg ]] ||
      { cat "$log"; echo "SMOKE FAILED: no results.csv or SVG"; exit 1; }
    positive "^\\| tiny \\| best-fit \\| 2 \\| $num ± $num% \\| ($num) ± $num% \\|"
    positive "^\\| tiny \\| fgd \\| 2 \\| $num ± $num% \\| ($num) ± $num% \\|"
    # The held-out generator (bench/make_openb_heldout.py) on the tiny trace
    # with CPU-only tasks added as its "default": a cpu250 variant whose
    # GPU tasks are default's and a quarter of whose tasks are CPU-only, run
    # through the matrix against the authors' cpu250 figure.
    { cat "$data/openb_pod_list_tiny.csv"
      for i in $(seq 24 29); do
        printf 'openb-pod-%04d,%d,%d,0,0,,BE,Running,0,1,0\n' "$i" 8000 16384
      done
    } >"$data/openb_pod_list_default.csv"
    run "$py" "$here/make_openb_heldout.py" --data "$data" --out "$tmp/heldout" --variants cpu250
    cp "$log" "$tmp/heldout.log"
    n_cpu=$(awk -F, 'NR > 1 && $4 == 0' "$tmp/heldout/openb_pod_list_cpu250.csv" | wc -l)
    n_gpu=$(awk -F, 'NR > 1 && $4 != 0' "$tmp/heldout/openb_pod_list_cpu250.csv" | wc -l)
    ((n_gpu == 24 && n_cpu == 8)) ||
      { cat "$tmp/heldout.log"; echo "SMOKE FAILED: cpu250 has $n_cpu CPU + $n_gpu GPU tasks, want 8 + 24"; exit 1; }
    run "$here/run_openb_matrix.sh" --build "$build" --data "$tmp/heldout" --out "$tmp/out-heldout" \
      --policies fgd --traces cpu250 --seeds 42 --plot-trace cpu250
    positive "^\\| cpu250 \\| fgd \\| 1 \\| $num ± $num% \\| ($num) ± $num% \\| 93[.]41% \\|"
    ;;
  upload)
    # The script compares the received file with the sent one (cmp).
    run env SIZE_MIB=4 RUNS=1 "$here/run_upload_bench.sh" "$build"
    positive "^gpupool +$num +([0-9]+) +[0-9]+$"
    positive "^rsync +$num +([0-9]+) +[0-9]+$"
    positive "^gpupool/rsync: time $num, wire bytes ($num)$"
    ;;
  ddp)
    # A tiny model: the pool's two-rank torch job in the sandbox next to the
    # same two processes started directly (the process executor's run is
    # the same path without bubblewrap: left out to keep the smoke short);
    # the script fails when a job fails.
    run "$here/run_ddp_bench.sh" --build "$build" --runs 1 --steps 5 \
      --model "--hidden 16 --layers 1 --batch 8" --modes "direct sandbox"
    positive "^direct +($num) "
    positive "^pool \\(sandbox\\) +($num) "
    ;;
  tunnel)
    run "$here/run_tunnel_bench.sh" --build "$build" --runs 1 --mb 2 --count 50 --probes 2 --conns 2 \
      --jupyter-runs 1
    expect '^RESULT probes_idle_started_ms=.* n=2 no_started_ms=0 node_always_ready=1 ' \
      '^RESULT probes_busy_started_ms=.* n=2 no_started_ms=0 node_always_ready=1 '
    positive "^RESULT throughput_upload_tunnel_mbps=($num) "
    positive "^RESULT throughput_download_tunnel_mbps=($num) "
    positive "^RESULT latency_tunnel_p50_us=($num) "
    positive "^RESULT busy_streams=2 seconds=$num bytes=([0-9]+) "
    positive "^RESULT jupyter_default_ready_ms=($num) "
    ;;
  migration)
    run env PAD_MIB=1 RUNS=1 INTERVAL=10s "$py" "$here/migration_bench.py" "$build"
    positive "^ +gpu_freed_s: median ($num) s"
    positive "^ +vacated_s: median ($num) s"
    positive "^ +running_again_s: median ($num) s"
    ;;
  net)
    run env RUNS=1 MIB=2 PINGS=50 CONNECTS=5 "$py" "$here/net_bench.py" "$build"
    expect '^  private  \{.*\}  \(1 runs, 0 failed\)$' '^  host     \{.*\}  \(1 runs, 0 failed\)$'
    positive "^  private  \\{\"throughput_mib_s\": ($num)"
    positive "^  host     \\{\"throughput_mib_s\": ($num)"
    ;;
  flood)
    # A 2 s flood under a 1 MiB output limit: the job ends and its output
    # is cut at the limit.
    run env RUNS=1 FLOOD_S=2 LIMIT=1MiB "$py" "$here/output_flood_bench.py" "$build"
    expect "^run 1: .*\"limit_reached\": \\[\"output limit of 1 MiB reached"
    positive "^  during_n +($num)"
    positive "^  output_bytes +($num) MiB"
    ;;
  dashboard)
    # 5 agents, 200 jobs of history, one run: every request answered, every
    # page showed its data in Chromium (in a network namespace of its own:
    # tests/integration/in_own_network.sh says why).
    run "$here/../tests/integration/in_own_network.sh" env AGENTS=5 HISTORY=200 PENDING=5 RUNS=1 \
      "$py" "$here/dashboard_bench.py" "$build"
    expect "^filled .*: 10 nodes, 200 finished jobs"
    positive "^  jobs: first page +($num) ms"
    positive "^  queue: a page of 100 +($num) ms"
    positive "^  overview +first contentful paint +($num) ms"
    positive "^  machines +first contentful paint +[0-9]+ ms +data shown +($num) ms"
    ;;
  *)
    echo "unknown smoke $name" >&2
    exit 2
    ;;
esac
cat "$log"
echo "smoke $name: passed"
