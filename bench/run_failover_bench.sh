#!/usr/bin/env bash
# Failover under load: two servers on one PostgreSQL (tests/postgres/pg_server.sh
# starts a private one), AGENTS simulated agents heartbeating (given both
# servers), a client submitting jobs through both, each job running TASK_MS
# on a simulated agent (so that some run through the failover); then kill -9
# of the leader. Per run it prints: how long until the standby leads, until a
# submission is accepted again, until every agent is connected again, how
# many acknowledged jobs the new leader lacks (must be 0), how many of them
# then finished (succeeded; all must), and how many jobs were started twice
# (two attempts: must be 0).
#
#   bench/run_failover_bench.sh [RUNS=10] [AGENTS=1000] [LEASE_MS=6000]
#   TASK_MS=20000 by default.
#
# Needs a build (BUILD=build by default): bin/gpupool, bin/gpupool-agent-load.
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-10}
AGENTS=${2:-1000}
LEASE_MS=${3:-6000}
TASK_MS=${TASK_MS:-20000}
BUILD=${BUILD:-build}
G=$BUILD/bin/gpupool
LOAD=$BUILD/bin/gpupool-agent-load
PG_SCRIPT=tests/postgres/pg_server.sh

now() { date +%s.%N; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
role() { curl -s -m 1 "$1/healthz" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("role",""))' 2>/dev/null; }
wait_role() { # URL ROLE TIMEOUT_S
  local end=$(($(date +%s) + $3))
  while [ "$(date +%s)" -lt $end ]; do [ "$(role "$1")" = "$2" ] && return 0; sleep 0.05; done
  return 1
}
server() { # DIR PORT STORE
  "$G" server --data-dir "$1" --listen "127.0.0.1:$2" --sessions-listen 127.0.0.1:0 --insecure \
    --store "$3" --leader-lease-ms "$LEASE_MS" --rate-limit 0/s --log-level warn >"$1.log" 2>&1 &
  echo $!
}

# In a subshell of its own, so that whatever happens its processes, its
# PostgreSQL and its directory go at its end.
one_run() (
  local W pa="" pb="" pl="" ps=""
  W=$(mktemp -d /tmp/failover.XXXXXX)
  chmod 755 "$W"
  trap 'kill $ps $pl $pa $pb 2>/dev/null; wait 2>/dev/null; "$PG_SCRIPT" stop "$W/pg" >/dev/null 2>&1; rm -rf "$W"' EXIT
  local PG; PG=$("$PG_SCRIPT" start "$W/pg") || { echo "no PostgreSQL"; return 1; }
  local PA PB; PA=$(port); PB=$(port)
  local A="http://127.0.0.1:$PA" B="http://127.0.0.1:$PB"
  pa=$(server "$W/a" "$PA" "$PG"); wait_role "$A" leader 60 || { echo "a never led"; return 1; }
  pb=$(server "$W/b" "$PB" "$PG"); wait_role "$B" standby 60 || { echo "b never stood by"; return 1; }
  "$LOAD" --server "$A,$B" --join-token-file "$W/a/join.token" --agents "$AGENTS" \
    --heartbeat-ms 5000 --duration-s 900 --report-s 0.5 --ready-file "$W/ready" \
    --task-ms "$TASK_MS" >"$W/load.log" 2>&1 &
  pl=$!
  local end=$(($(date +%s) + 120))
  while [ ! -s "$W/ready" ] && [ "$(date +%s)" -lt $end ]; do sleep 0.2; done
  [ -s "$W/ready" ] || { echo "agents never all welcomed: $(tail -2 "$W/load.log")"; return 1; }
  # A client submitting through both servers: an acknowledged id is one the
  # server answered with.
  (
    export GPUPOOL_SERVER="$A,$B" GPUPOOL_TOKEN; GPUPOOL_TOKEN=$(cat "$W/a/admin.token")
    export GPUPOOL_CONFIG=$W/none.json
    while :; do
      # When it was sent: a submission sent after the kill and answered was
      # accepted by the new leader.
      t=$(now)
      id=$("$G" submit --name f -o json -- true 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' 2>/dev/null) &&
        echo "$t $id $(now)" >>"$W/acked"
      sleep 0.1
    done
  ) &
  ps=$!
  sleep 3
  kill -9 "$pa"
  local t0; t0=$(now)
  wait_role "$B" leader 120 || { echo "b never led"; return 1; }
  local t_lead; t_lead=$(now)
  # The first submission sent after the kill and acknowledged: when its answer came.
  end=$(($(date +%s) + 120))
  local t_accept=""
  while [ -z "$t_accept" ] && [ "$(date +%s)" -lt $end ]; do
    t_accept=$(awk -v t0="$t0" '$1 > t0 {print $3; exit}' "$W/acked" 2>/dev/null)
    sleep 0.05
  done
  # Every agent connected again: the load tool's count (every 0.5 s) first
  # drops, then is back at AGENTS.
  local t_agents="" dropped="" c
  end=$(($(date +%s) + 180))
  while [ -z "$t_agents" ] && [ "$(date +%s)" -lt $end ]; do
    c=$(grep -o ' connected=[0-9]*' "$W/load.log" | tail -1 | cut -d= -f2)
    if [ -z "$dropped" ]; then
      [ -n "$c" ] && [ "$c" -lt "$AGENTS" ] && dropped=1
    elif [ "$c" = "$AGENTS" ]; then
      t_agents=$(now)
    fi
    sleep 0.1
  done
  kill "$ps" 2>/dev/null; wait "$ps" 2>/dev/null
  # Every acknowledged job is in the new leader's database, and each
  # finishes (the jobs running at the kill run on).
  local acked lost finished
  acked=$(wc -l <"$W/acked")
  jobs_check() {
    GPUPOOL_SERVER=$B GPUPOOL_TOKEN=$(cat "$W/a/admin.token") GPUPOOL_CONFIG=$W/none.json \
      "$G" jobs -o json --all --limit 10000 2>/dev/null | python3 -c '
import json, sys
state = {j["id"]: j["state"] for j in json.load(sys.stdin)}
acked = [int(l.split()[1]) for l in open(sys.argv[1])]
print(sum(1 for i in acked if i not in state), sum(1 for i in acked if state.get(i) == "succeeded"))' "$W/acked"
  }
  read -r lost finished < <(jobs_check)
  end=$(($(date +%s) + TASK_MS / 1000 + 120))
  while [ "${finished:-0}" -lt "$acked" ] && [ "$(date +%s)" -lt $end ]; do
    sleep 1
    read -r lost finished < <(jobs_check)
  done
  kill "$pl" 2>/dev/null; wait "$pl" 2>/dev/null
  local twice; twice=$(grep -o 'jobs_started_twice=[0-9]*' "$W/load.log" | tail -1 | cut -d= -f2)
  printf 'run: lead %.2f s, accept %s s, agents %s s, acked %d, lost %s, finished %s, started twice %s\n' \
    "$(echo "$t_lead - $t0" | bc)" \
    "$([ -n "$t_accept" ] && printf %.2f "$(echo "$t_accept - $t0" | bc)" || echo never)" \
    "$([ -n "$t_agents" ] && printf %.2f "$(echo "$t_agents - $t0" | bc)" || echo never)" \
    "$acked" "$lost" "$finished" "${twice:-?}"
)

echo "failover bench: $RUNS runs, $AGENTS agents, lease $LEASE_MS ms, tasks $TASK_MS ms, $(nproc) cores"
for _ in $(seq "$RUNS"); do one_run; done
