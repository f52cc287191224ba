#!/usr/bin/env bash
# bench_smoke: starts a server on a free loopback port and runs
# gpupool-agent-load with 20 agents for 3 s; passes when all 20 are welcomed
# and none is disconnected.  Usage: smoke.sh GPUPOOL_BIN AGENT_LOAD_BIN
set -euo pipefail
gpupool=$1
load=$2
tmp=$(mktemp -d /tmp/gpupool-bench-smoke.XXXXXX)
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

"$gpupool" server --data-dir "$tmp/server" --listen 127.0.0.1:0 --log-level warn >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
  [[ -s $tmp/server/server.url ]] && break
  sleep 0.1
done
[[ -s $tmp/server/server.url ]] || { echo "server did not start"; cat "$tmp/server.log"; exit 1; }

out=$("$load" --server "$(cat "$tmp/server/server.url")" --join-token-file "$tmp/server/join.token" \
  --agents 20 --heartbeat-ms 500 --duration-s 3 --ramp-per-s 100 --report-s 0)
echo "$out"
grep -q "final .* welcomed=20 connected=20 .* disconnects=0" <<<"$out"
