# Shell functions shared by the pool benchmarks (bench/run_pool_bench.sh,
# bench/run_executor_bench.sh). Source it, then call pool_init NAME once
# `build` is set.

# pool_init NAME: sets gpupool and bench (the binaries, checked), tmp (a
# scratch directory removed at exit, with every pool started in it) and
# agent_config (given to every agent: executors sandbox, the default, and
# process). KEEP_TMP=1 keeps tmp at the end.
pool_init() {
  gpupool=${GPUPOOL_BIN:-$build/bin/gpupool}
  bench=${POOL_BENCH_BIN:-$build/bin/gpupool-pool-bench}
  local b
  for b in "$gpupool" "$bench"; do
    [[ -x $b ]] || { echo "missing $b (build it: ninja -C $build gpupool gpupool-pool-bench)" >&2; exit 2; }
  done
  tmp=$(mktemp -d "/tmp/$1.XXXXXX")
  agent_config=$tmp/agent.yaml
  echo "executors: [sandbox, process]" >"$agent_config"
  # KEEP_TMP=1 keeps the pools' directories (logs, data) for a look after.
  trap 'stop_pool; if [[ -n ${KEEP_TMP:-} ]]; then echo "kept $tmp" >&2; else rm -rf "$tmp"; fi' EXIT
  trap 'exit 130' INT TERM
}
dev_pid=
server_pid=
agent_pids=
stop_pool() {
  if [[ -n $dev_pid ]]; then
    kill -TERM "$dev_pid" 2>/dev/null || true
    wait "$dev_pid" 2>/dev/null || true
    dev_pid=
  fi
  # Shims of jobs still running (dev's agents run with --on-exit kill, so
  # normally there are none); scoped to this run's directory.
  pkill -TERM -f -- "--data-dir $tmp/" 2>/dev/null || true
}

# start_pool N: a fresh `gpupool dev` pool with N agents of 8 simulated GPUs;
# returns once N nodes are ready. Sets GPUPOOL_SERVER and GPUPOOL_TOKEN, and
# pool_dir (the agents' data dirs are $pool_dir/data/agent-I).
start_pool() {
  local n=$1 dir
  dir=$(mktemp -d "$tmp/pool.XXXX")
  pool_dir=$dir
  "$gpupool" dev --agents "$n" --simulate-gpus 8xA100:80GiB --listen 127.0.0.1:0 --data-dir "$dir/data" \
    --env-file "$dir/env" --no-config --log-level warn ${agent_config:+--agent-config "$agent_config"} \
    >"$dir/dev.log" 2>&1 &
  dev_pid=$!
  for _ in $(seq 300); do
    [[ -s $dir/env ]] && break
    sleep 0.1
  done
  [[ -s $dir/env ]] || { echo "gpupool dev did not start" >&2; cat "$dir/dev.log" >&2; return 1; }
  # shellcheck disable=SC1091
  source "$dir/env"
  export GPUPOOL_SERVER GPUPOOL_TOKEN GPUPOOL_CA_FINGERPRINT
  # curl checks the server (TLS by default) against the pool's CA.
  export CURL_CA_BUNDLE=$dir/data/server/tls/ca.crt
  local ready=0
  for _ in $(seq 300); do
    ready=$(curl -sf -H "Authorization: Bearer $GPUPOOL_TOKEN" "$GPUPOOL_SERVER/v1/nodes" |
      jq '[.nodes[] | select(.state == "ready")] | length' 2>/dev/null || echo 0)
    [[ $ready -ge $n ]] && break
    sleep 0.1
  done
  [[ $ready -ge $n ]] || { echo "only $ready of $n agents became ready" >&2; cat "$dir/dev.log" >&2; return 1; }
  sleep 1  # let the joins settle (first heartbeats, scheduling passes)
  server_pid=$(pgrep -f "server --data-dir $dir/data/server" | head -1)
  agent_pids=$(pgrep -f "agent --server $GPUPOOL_SERVER " | tr '\n' ' ')
}

# field KEY LINE: the value of KEY=VALUE in a RESULT line.
field() { tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p"; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "n/a"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

