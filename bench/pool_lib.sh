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
server_pid=
agent_pids=
# Extra `gpupool server` flags for every pool (the scripts may set it).
# --rate-limit 0/s: no per-token request limit. The default (50 requests a
# second after a burst of 200, per token) would cap one token's submissions
# at 50 jobs/s, far below what the pool core is measured at; the scripts
# use the admin token alone, on loopback.
server_args=(--rate-limit 0/s)
stop_pool() {
  local p
  # The agents first (--on-exit kill: each stops its jobs' shims as it
  # exits), then the server.
  for p in $agent_pids $server_pid; do kill -TERM "$p" 2>/dev/null || true; done
  for p in $agent_pids $server_pid; do wait "$p" 2>/dev/null || true; done
  agent_pids=
  server_pid=
  # Shims of jobs still running (normally none); scoped to this run's
  # directory.
  pkill -TERM -f -- "--data-dir $tmp/" 2>/dev/null || true
}

# start_pool N: a fresh pool on loopback as `gpupool dev` makes one (TLS with
# the server's own CA, agents joined with the join token, --on-exit kill),
# with N agents of 8 simulated GPUs, started here so that the server gets
# server_args; returns once N nodes are ready. Sets and exports
# GPUPOOL_SERVER, GPUPOOL_TOKEN (the admin's), GPUPOOL_CA_FINGERPRINT (the
# pool CA's pin), CURL_CA_BUNDLE, GPUPOOL_CONFIG (none: only these count);
# sets server_pid, agent_pids and pool_dir (the server's data dir is
# $pool_dir/data/server, the agents' $pool_dir/data/agent-I, named
# dev-agent-I; their logs $pool_dir/server.log, $pool_dir/agent-I.log).
start_pool() {
  local n=$1 dir i join
  dir=$(mktemp -d "$tmp/pool.XXXX")
  pool_dir=$dir
  "$gpupool" server --data-dir "$dir/data/server" --listen 127.0.0.1:0 --log-level warn \
    "${server_args[@]}" >"$dir/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 300); do
    [[ -s $dir/data/server/server.url ]] && break
    sleep 0.1
  done
  [[ -s $dir/data/server/server.url ]] || { echo "the server did not start" >&2; cat "$dir/server.log" >&2; return 1; }
  GPUPOOL_SERVER=$(cat "$dir/data/server/server.url")
  GPUPOOL_TOKEN=$(cat "$dir/data/server/admin.token")
  join=$(cat "$dir/data/server/join.token")
  # The join token ends with the pin of the pool's CA (gpj_SECRET.HEX).
  GPUPOOL_CA_FINGERPRINT="sha256:${join#*.}"
  GPUPOOL_CONFIG=$tmp/no-config.json
  export GPUPOOL_SERVER GPUPOOL_TOKEN GPUPOOL_CA_FINGERPRINT GPUPOOL_CONFIG
  # curl checks the server (TLS) against the pool's CA.
  export CURL_CA_BUNDLE=$dir/data/server/tls/ca.crt
  agent_pids=
  for i in $(seq "$n"); do
    "$gpupool" agent --server "$GPUPOOL_SERVER" --join-token "$join" --data-dir "$dir/data/agent-$i" \
      --name "dev-agent-$i" --on-exit kill --log-level warn --simulate-gpus 8xA100:80GiB \
      ${agent_config:+--config "$agent_config"} >"$dir/agent-$i.log" 2>&1 &
    agent_pids+="$! "
  done
  local ready=0
  for _ in $(seq 300); do
    ready=$(curl -sf -H "Authorization: Bearer $GPUPOOL_TOKEN" "$GPUPOOL_SERVER/v1/nodes" |
      jq '[.nodes[] | select(.state == "ready")] | length' 2>/dev/null || echo 0)
    [[ $ready -ge $n ]] && break
    sleep 0.1
  done
  [[ $ready -ge $n ]] || { echo "only $ready of $n agents became ready" >&2; tail -n 20 "$dir"/*.log >&2; return 1; }
  sleep 1  # let the joins settle (first heartbeats, scheduling passes)
}

# field KEY LINE: the value of KEY=VALUE in a RESULT line.
field() { tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p"; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "n/a"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

