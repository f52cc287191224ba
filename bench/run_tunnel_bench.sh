#!/usr/bin/env bash
# Interactive sessions' tunnels (issue 9; docs/performance.md, "Interactive
# sessions and tunnels"). Starts a real pool on this machine: `gpupool
# server` and one `gpupool agent` (1 simulated A100, executors sandbox and
# process), TLS on loopback as users run it. Then:
#
#  1-2. a shell session (`session: {kind: shell, ports: [3 ports]}`, the
#       process executor, so the job shares the host's network and its
#       ports are also reachable directly) whose command is
#       bench/tunnel_servers.py: sink, source and echo servers. `gpupool
#       session connect ID -p L:P ...` forwards three local ports to them.
#       bench/tunnel_load.py measures upload and download throughput and
#       64-byte round trips, through the tunnel and directly (the baseline),
#       runs alternating.
#  4.   tiny jobs (`sleep 0.2`, gpus 0, the process executor) on the same
#       agent, idle and then while 10 connections download from the source
#       through the tunnel without end: from the API created->started (the
#       start order and the running report) and finished-started-0.2 s (the
#       exit report); whether the node stayed ready and connected (/v1/nodes
#       polled every 200 ms; the server's log).
#  3.   (after the shell session is stopped, freeing the GPU) `gpupool
#       session start --jupyter --gpus 1` until the server's proxy answers
#       /v1/sessions/ID/proxy/api/status, and until the command returns;
#       with the default executor (the bubblewrap sandbox), no image.
#
# usage: bench/run_tunnel_bench.sh [--build DIR] [--runs N] [--mb MB]
#          [--count N] [--jupyter-runs N] [--jupyter-executors "sandbox process"]
#          [--probes N] [--conns N] [--skip "throughput latency busy jupyter"]
# KEEP_TMP=1 keeps the pool's directory (logs, data) at the end.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$here/../build
runs=7
mb=256
count=2000
jupyter_runs=5
jupyter_executors=sandbox
probes=15
conns=10
skip=
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --mb) mb=$2; shift 2 ;;
    --count) count=$2; shift 2 ;;
    --jupyter-runs) jupyter_runs=$2; shift 2 ;;
    --jupyter-executors) jupyter_executors=$2; shift 2 ;;
    --probes) probes=$2; shift 2 ;;
    --conns) conns=$2; shift 2 ;;
    --skip) skip=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
gpupool=${GPUPOOL_BIN:-$build/bin/gpupool}
[[ -x $gpupool ]] || { echo "missing $gpupool (build it: ninja -C $build gpupool)" >&2; exit 2; }
py=/usr/bin/python3
load=$here/tunnel_load.py
skipped() { [[ " $skip " == *" $1 "* ]]; }

tmp=$(mktemp -d /tmp/gpupool-tunnel-bench.XXXXXX)
server_pid='' agent_pid='' connect_pid=''
cleanup() {
  if [[ -n $connect_pid ]]; then kill "$connect_pid" 2>/dev/null || true; fi
  # --on-exit kill: the agent stops its jobs (the shims) before it exits.
  if [[ -n $agent_pid ]]; then kill -TERM "$agent_pid" 2>/dev/null || true; wait "$agent_pid" 2>/dev/null || true; fi
  if [[ -n $server_pid ]]; then kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  if [[ -n ${KEEP_TMP:-} ]]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(free -g | awk '/^Mem:/ {print $2}') GiB, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "binary:  $gpupool (built $(date -u -r "$gpupool" +%Y-%m-%dT%H:%MZ); tree at $(cd "$here/.." && git log -1 --format=%h 2>/dev/null || echo '?'))"
echo "date:    $(date -u +%Y-%m-%dT%H:%MZ)"
echo

# ---- the pool ----
echo "executors: [sandbox, process]" >"$tmp/agent.yaml"
"$gpupool" server --data-dir "$tmp/server" --listen 127.0.0.1:0 --log-level info >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 300); do [[ -s $tmp/server/server.url ]] && break; sleep 0.1; done
[[ -s $tmp/server/server.url ]] || { echo "the server did not start" >&2; cat "$tmp/server.log" >&2; exit 1; }
GPUPOOL_SERVER=$(cat "$tmp/server/server.url")
GPUPOOL_TOKEN=$(cat "$tmp/server/admin.token")
join_token=$(cat "$tmp/server/join.token")
GPUPOOL_CA_FINGERPRINT="sha256:${join_token#*.}"
GPUPOOL_CONFIG=$tmp/no-config.json
ca=$tmp/server/tls/ca.crt
export GPUPOOL_SERVER GPUPOOL_TOKEN GPUPOOL_CA_FINGERPRINT GPUPOOL_CONFIG CURL_CA_BUNDLE=$ca
"$gpupool" agent --server "$GPUPOOL_SERVER" --join-token "$join_token" --data-dir "$tmp/agent" --name bench-1 \
  --config "$tmp/agent.yaml" --simulate-gpus 1xA100:80GiB --on-exit kill --log-level info >"$tmp/agent.log" 2>&1 &
agent_pid=$!
api() { curl -sf -H "Authorization: Bearer $GPUPOOL_TOKEN" "$GPUPOOL_SERVER$1"; }
for _ in $(seq 300); do
  [[ $(api /v1/nodes 2>/dev/null | jq '[.nodes[] | select(.state == "ready")] | length') == 1 ]] && break
  sleep 0.1
done
[[ $(api /v1/nodes | jq '[.nodes[] | select(.state == "ready")] | length') == 1 ]] ||
  { echo "the agent did not join" >&2; cat "$tmp/agent.log" >&2; exit 1; }

# ---- the shell session with the three servers ----
read -r sink source echo_port lsink lsource lecho < <($py -c '
import socket
ss = [socket.socket() for _ in range(6)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
cat >"$tmp/session.yaml" <<EOF
name: tunnel-bench
executor: process
run: exec $py $here/tunnel_servers.py $sink $source $echo_port
resources: {gpus: 1}
session: {kind: shell, ports: [$sink, $source, $echo_port], idle_timeout: 0}
EOF
if ! skipped throughput || ! skipped latency || ! skipped busy; then
  sid=$("$gpupool" submit --quiet "$tmp/session.yaml" | tail -1)
  [[ $(api "/v1/jobs/$sid?until=running&wait=30s" | jq -r .state) == running ]] ||
    { echo "session $sid did not run" >&2; api "/v1/jobs/$sid" >&2; exit 1; }
  for _ in $(seq 100); do
    $py -c "import socket; socket.create_connection(('127.0.0.1', $echo_port), 1)" 2>/dev/null && break
    sleep 0.1
  done
  "$gpupool" session connect "$sid" -p "$lsink:$sink" -p "$lsource:$source" -p "$lecho:$echo_port" \
    >"$tmp/connect.log" 2>&1 &
  connect_pid=$!
  for _ in $(seq 100); do
    [[ $(grep -c '^Forwarding' "$tmp/connect.log" || true) == 3 ]] && break
    sleep 0.1
  done
  echo "session $sid (process executor): sink $sink, source $source, echo $echo_port; session connect on $lsink, $lsource, $lecho"
  echo
  skipped throughput || $py "$load" throughput --sink-direct "$sink" --source-direct "$source" \
    --sink-tunnel "$lsink" --source-tunnel "$lsource" --mb "$mb" --runs "$runs" | tee -a "$tmp/results"
  echo
  skipped latency || $py "$load" latency --echo-direct "$echo_port" --echo-tunnel "$lecho" --count "$count" \
    --runs "$runs" | tee -a "$tmp/results"
  echo
  if ! skipped busy; then
    $py "$load" probes --ca "$ca" --busy-port "$lsource" --conns "$conns" --probes "$probes" | tee -a "$tmp/results"
    if grep -Ei 'disconnect|nothing received|offline|lost' "$tmp/server.log" >"$tmp/bad" ; then
      echo "the server's log has:"; head -5 "$tmp/bad"
    else
      echo "the server's log has no disconnect, silence, offline or lost line"
    fi
    echo
  fi
  kill "$connect_pid" 2>/dev/null || true
  wait "$connect_pid" 2>/dev/null || true
  connect_pid=
  "$gpupool" session stop "$sid" >/dev/null
  for _ in $(seq 300); do
    [[ $(api "/v1/jobs/$sid" | jq -r .state) =~ ^(succeeded|failed|cancelled)$ ]] && break
    sleep 0.1
  done
  sleep 1  # the agent reports the GPU free
fi

# ---- Jupyter ----
if ! skipped jupyter; then
  for ex in $jupyter_executors; do
    [[ $ex == sandbox ]] && ex_arg=() || ex_arg=(--executor "$ex")
    $py "$load" jupyter --gpupool "$gpupool" --ca "$ca" --runs "$jupyter_runs" "${ex_arg[@]}" | tee -a "$tmp/results"
    echo
  done
fi

echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
grep '^RESULT' "$tmp/results" || true
