#!/usr/bin/env bash
# Server memory and CPU with many idle agents: starts `gpupool server` on
# loopback and gpupool-agent-load with --agents simulated agents
# heartbeating every --heartbeat-ms, waits until all are welcomed, then
# samples the server process only: RSS (VmRSS) at the end of each window and
# CPU (utime+stime from /proc/PID/stat) over each --window-s window, as % of
# one core. Prints each sample and the medians. With --scrape-s S, a
# Prometheus-like client reads GET /metrics every S seconds meanwhile (and
# the scrapes' median time and size are printed). With --submit N, after
# the samples, N one-GPU jobs are submitted (2 per second) and each is
# timed from submission until it runs (bench/submit_latency.py; the
# simulated agents hold every task for the rest of the run), with the
# scheduling passes' mean duration meanwhile. See docs/performance.md.
#
# usage: bench/run_agent_load.sh [--build DIR] [--agents N] [--heartbeat-ms MS]
#                                [--samples N] [--window-s S] [--warmup-s S]
#                                [--ramp-per-s N] [--scrape-s S] [--postgres] [--gpus N]
#                                [--submit N]
#
# --postgres: the server keeps its state in a private PostgreSQL that this
# script starts (tests/postgres/pg_server.sh) instead of SQLite.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$here/../build
agents=1000
heartbeat_ms=5000
samples=3
window_s=60
warmup_s=15
ramp=200
scrape_s=0
postgres=0
gpus=2
submit=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --agents) agents=$2; shift 2 ;;
    --heartbeat-ms) heartbeat_ms=$2; shift 2 ;;
    --samples) samples=$2; shift 2 ;;
    --window-s) window_s=$2; shift 2 ;;
    --warmup-s) warmup_s=$2; shift 2 ;;
    --ramp-per-s) ramp=$2; shift 2 ;;
    --scrape-s) scrape_s=$2; shift 2 ;;
    --postgres) postgres=1; shift ;;
    --gpus) gpus=$2; shift 2 ;;
    --submit) submit=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
gpupool=${GPUPOOL_BIN:-$build/bin/gpupool}
load=${AGENT_LOAD_BIN:-$build/bin/gpupool-agent-load}
for b in "$gpupool" "$load"; do
  [[ -x $b ]] || { echo "missing $b (build it: ninja -C $build gpupool gpupool-agent-load)" >&2; exit 2; }
done

# One descriptor per connection on each side.
ulimit -n "$(ulimit -Hn)"

tmp=$(mktemp -d /tmp/gpupool-agent-load.XXXXXX)
server_pid=
load_pid=
scrape_pid=
stop_all() {
  for p in $scrape_pid $load_pid $server_pid; do
    kill -TERM "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  scrape_pid=
  load_pid=
  server_pid=
  if [[ $postgres == 1 ]]; then "$here/../tests/postgres/pg_server.sh" stop "$tmp/pg" >/dev/null 2>&1 || true; fi
}
trap 'stop_all; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

store=()
if [[ $postgres == 1 ]]; then
  chmod 755 "$tmp"
  store=(--store "$("$here/../tests/postgres/pg_server.sh" start "$tmp/pg")")
fi
# No rate limit: the 1,000 agents enroll with the one join token at --ramp-per-s.
"$gpupool" server --insecure --data-dir "$tmp/server" --listen 127.0.0.1:0 --heartbeat-ms "$heartbeat_ms" \
  --rate-limit 0/s "${store[@]}" \
  --log-level warn >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 200); do
  [[ -s $tmp/server/server.url ]] && break
  sleep 0.1
done
[[ -s $tmp/server/server.url ]] || { echo "the server did not start" >&2; cat "$tmp/server.log" >&2; exit 1; }
url=$(cat "$tmp/server/server.url")

ticks=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }  # utime + stime
rss_mib() { awk '/^VmRSS:/ {printf "%.1f\n", $2 / 1024}' "/proc/$1/status"; }
hwm_mib() { awk '/^VmHWM:/ {printf "%.1f\n", $2 / 1024}' "/proc/$1/status"; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "n/a"; else if (NR % 2) print a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2]+a[NR/2+1])/2}'; }

echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(free -g | awk '/^Mem:/ {print $2}') GiB"
echo "server:  $url (pid $server_pid), idle RSS $(rss_mib "$server_pid") MiB"

duration=$((warmup_s + samples * window_s + 120 + agents / (ramp > 0 ? ramp : 1000) + submit))
"$load" --server "$url" --join-token-file "$tmp/server/join.token" --agents "$agents" --gpus "$gpus" \
  --heartbeat-ms "$heartbeat_ms" --ramp-per-s "$ramp" --duration-s "$duration" --report-s 30 \
  --ready-file "$tmp/ready" --task-ms $((submit > 0 ? 86400000 : 0)) >"$tmp/load.log" 2>&1 &
load_pid=$!

for _ in $(seq 1200); do
  [[ -s $tmp/ready ]] && break
  kill -0 "$load_pid" 2>/dev/null || break
  sleep 0.1
done
if [[ ! -s $tmp/ready ]]; then
  echo "not every agent was welcomed within 120 s" >&2
  cat "$tmp/load.log" >&2
  exit 1
fi
echo "all $agents agents welcomed after $(cat "$tmp/ready") ms; server RSS $(rss_mib "$server_pid") MiB;" \
  "warming up ${warmup_s} s"
sleep "$warmup_s"
if [[ $scrape_s != 0 ]]; then
  token=$(cat "$tmp/server/admin.token")
  # Each scrape's seconds and bytes, as curl measures them.
  while true; do
    curl -sf -o /dev/null -H "Authorization: Bearer $token" -w '%{time_total} %{size_download}\n' \
      "$url/metrics" >>"$tmp/scrapes" || echo "scrape failed" >>"$tmp/scrapes"
    sleep "$scrape_s"
  done &
  scrape_pid=$!
fi

cpus=()
rsss=()
load_cpus=()
for i in $(seq "$samples"); do
  c0=$(cpu_ticks "$server_pid")
  l0=$(cpu_ticks "$load_pid")
  t0=$(date +%s.%N)
  sleep "$window_s"
  c1=$(cpu_ticks "$server_pid")
  l1=$(cpu_ticks "$load_pid")
  t1=$(date +%s.%N)
  cpu=$(awk -v a="$c0" -v b="$c1" -v t0="$t0" -v t1="$t1" -v hz="$ticks" 'BEGIN {printf "%.2f", (b - a) / hz / (t1 - t0) * 100}')
  lcpu=$(awk -v a="$l0" -v b="$l1" -v t0="$t0" -v t1="$t1" -v hz="$ticks" 'BEGIN {printf "%.2f", (b - a) / hz / (t1 - t0) * 100}')
  rss=$(rss_mib "$server_pid")
  cpus+=("$cpu")
  rsss+=("$rss")
  load_cpus+=("$lcpu")
  echo "sample $i: server CPU $cpu% of one core over ${window_s} s, RSS $rss MiB (load generator CPU $lcpu%)"
done
if [[ -n $scrape_pid ]]; then
  kill "$scrape_pid" 2>/dev/null || true
  wait "$scrape_pid" 2>/dev/null || true
  scrape_pid=
  grep -q "failed" "$tmp/scrapes" && { echo "a scrape failed" >&2; exit 1; }
  echo "scrapes: $(wc -l <"$tmp/scrapes") every ${scrape_s} s, median" \
    "$(awk '{print $1 * 1000}' "$tmp/scrapes" | median) ms, median" \
    "$(awk '{print $2}' "$tmp/scrapes" | median) bytes"
fi
if [[ $submit != 0 ]]; then
  python3 "$here/submit_latency.py" "$url" "$(cat "$tmp/server/admin.token")" "$submit" 2
fi
hwm=$(hwm_mib "$server_pid")
threads=$(awk '/^Threads:/ {print $2}' "/proc/$server_pid/status")
fds=$(ls "/proc/$server_pid/fd" | wc -l)

kill -TERM "$load_pid" 2>/dev/null || true
wait "$load_pid" 2>/dev/null || true
load_pid=
grep -E "all .* welcomed|final|close reasons" "$tmp/load.log" || true

echo
echo "== $agents agents, heartbeat every $heartbeat_ms ms, $samples x ${window_s} s windows:" \
  "server RSS median $(printf '%s\n' "${rsss[@]}" | median) MiB (peak $hwm MiB)," \
  "server CPU median $(printf '%s\n' "${cpus[@]}" | median)% of one core;" \
  "threads $threads, open fds $fds; load generator CPU median $(printf '%s\n' "${load_cpus[@]}" | median)%"
if grep -q "disconnects=0 " "$tmp/load.log"; then
  echo "   no agent was disconnected during the run"
else
  echo "   WARNING: some agents were disconnected (see above)"
fi
