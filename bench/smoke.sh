#!/usr/bin/env bash
# The benchmarks' smoke tests (CTest, label `integration`).
#
#   smoke.sh GPUPOOL_BIN AGENT_LOAD_BIN   (bench_smoke)
#     starts a server on a free loopback port and runs gpupool-agent-load with
#     20 agents for 3 s; passes when all 20 are welcomed and none is
#     disconnected.
#   smoke.sh --sched SCHED_BENCH_BIN      (sched_bench_smoke)
#     runs the smallest scheduler benchmarks briefly (one queue pass at 1k
#     GPUs and 1k pending, FGD placement at 1k GPUs); passes when none
#     reports an error and the queue pass places jobs.
#   smoke.sh --blob BLOB_BENCH_BIN        (blob_bench_smoke)
#     runs the chunker benchmark at 64 KiB average chunks briefly (one pass
#     over 256 MiB); passes when it reports no error, a throughput and a mean
#     chunk length within 0.6-1.6 x 64 KiB.
#   smoke.sh --tls TLS_BENCH_BIN          (tls_bench_smoke)
#     runs the TLS benchmarks' https Fetch and wss round trip briefly; passes
#     when both ran and neither reported an error.
#   smoke.sh --authz AUTHZ_BENCH_BIN      (authz_bench_smoke)
#     runs the four authorization benchmarks briefly; passes when all four
#     ran and none reported an error.
#   smoke.sh --pass PASS_BENCH_BIN        (pass_bench_smoke)
#     runs the server's scheduling pass at 10 nodes x 100 pending briefly;
#     passes when it ran without an error (a pass that placed a job, with no
#     room for one, is an error).
#   smoke.sh --accounting ACCOUNTING_BENCH_BIN   (accounting_bench_smoke)
#     runs the accounting benchmarks' small sets briefly (ticks with 1,000
#     running attempts, usage reports and the ledger's size over a year of
#     10,000 attempts); passes when all seven ran without an error, the
#     boundary tick posted a charge per attempt (and lending credits) and
#     the ledger reported its bytes per attempt-hour.
set -euo pipefail

# google_bench BIN FILTER COUNT KEYS: runs the benchmarks FILTER names
# briefly as JSON into $out, shows the lines matching KEYS, and fails unless
# exactly COUNT ran and none reported an error.
google_bench() {
  out=$("$1" --benchmark_filter="$2" --benchmark_min_time=0.01 --benchmark_format=json)
  grep -E "\"name\"|$4|\"error" <<<"$out"
  if grep -q '"error_occurred": true' <<<"$out"; then
    echo "a benchmark reported an error"
    exit 1
  fi
  [[ $(grep -c '"name": "BM_' <<<"$out") == "$3" ]] || { echo "expected $3 benchmarks"; exit 1; }
}
# first_value KEY: the first number reported for KEY in $out.
first_value() { grep -o "\"$1\": [0-9.e+]*" <<<"$out" | head -1 | awk '{print $2}'; }

if [[ ${1:-} == --sched ]]; then
  google_bench "$2" '^BM_Decide/gpus:1000/pending:1000$|^BM_Place/fgd/1000$' 2 \
    '"placed/pass"|"placements/s"'
  placed=$(first_value placed/pass)
  awk -v p="${placed:-0}" 'BEGIN { exit !(p > 0) }' || { echo "the queue pass placed nothing"; exit 1; }
  exit 0
fi

if [[ ${1:-} == --pass ]]; then
  google_bench "$2" '^BM_SchedulePass/nodes:10/pending:100/history:100$' 1 '"pending"|"live"'
  exit 0
fi

if [[ ${1:-} == --metrics ]]; then
  google_bench "$2" '^BM_Scrape/nodes:10/pending:100$' 1 '"bytes"|"series"'
  # 80 GPUs, 8 families each: at least 640 samples.
  series=$(first_value series)
  awk -v n="${series:-0}" 'BEGIN { exit !(n >= 640) }' || { echo "only ${series:-0} samples"; exit 1; }
  exit 0
fi

if [[ ${1:-} == --history ]]; then
  google_bench "$2" '^BM_Record/gpus:8/hours:1/|^BM_QueryWeek/gpus:8$' 2 '"bytes_per_gpu_day"|"points"'
  # A week of 8 GPUs at 5 min: 8 x 2,016 points.
  points=$(first_value points)
  awk -v p="${points:-0}" 'BEGIN { exit !(p == 16128) }' || { echo "the week query returned ${points:-0} points"; exit 1; }
  exit 0
fi

if [[ ${1:-} == --accounting ]]; then
  google_bench "$2" '^BM_Tick(Steady|Boundary)/attempts:1000$|^BM_Usage[A-Za-z]*/attempts:10000$|^BM_LedgerGrowth/attempts:10000/' 7 \
    '"posted"|"rows"|"bytes_per_attempt_hour"|"bytes_per_entry"'
  posted=$(first_value posted)
  awk -v p="${posted:-0}" 'BEGIN { exit !(p >= 1000) }' || { echo "the boundary tick posted ${posted:-0} entries"; exit 1; }
  per_hour=$(first_value bytes_per_attempt_hour)
  awk -v b="${per_hour:-0}" 'BEGIN { exit !(b > 0) }' || { echo "no bytes per attempt-hour reported"; exit 1; }
  exit 0
fi

if [[ ${1:-} == --tls ]]; then
  google_bench "$2" '^BM_Fetch/mode:1/|^BM_WsRoundTrip/mode:1/' 2 '"items_per_second"|"real_time"'
  exit 0
fi

if [[ ${1:-} == --authz ]]; then
  google_bench "$2" '^BM_Authorize|^BM_AuthenticateAndAuthorize' 4 '"real_time"'
  exit 0
fi

if [[ ${1:-} == --blob ]]; then
  google_bench "$2" '^BM_ChunkLengths/avg_kib:64$' 1 '"bytes_per_second"|"chunks"|"mean_B"'
  rate=$(first_value bytes_per_second)
  awk -v r="${rate:-0}" 'BEGIN { exit !(r > 0) }' || { echo "no throughput reported"; exit 1; }
  mean=$(first_value mean_B)
  awk -v m="${mean:-0}" 'BEGIN { exit !(m >= 0.6 * 65536 && m <= 1.6 * 65536) }' ||
    { echo "mean chunk length ${mean:-none} is not near 64 KiB"; exit 1; }
  exit 0
fi

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

# Plain HTTP: gpupool-agent-load speaks ws:// only (TLS costs: gpupool-tls-bench).
"$gpupool" server --insecure --data-dir "$tmp/server" --listen 127.0.0.1:0 --log-level warn >"$tmp/server.log" 2>&1 &
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
